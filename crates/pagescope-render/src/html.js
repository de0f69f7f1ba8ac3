// pagescope's HTML report: tables that sort, heat maps that zoom.
(function () {
  'use strict';

  // The sort key of a cell: its raw value (data-v) if numeric, else its text.
  function cellKey(td, numeric) {
    if (numeric) {
      var v = td.getAttribute('data-v');
      return v === null ? null : Number(v);
    }
    return td.textContent;
  }

  function sortTable(table, col, dir) {
    var ths = table.tHead.rows[0].cells;
    if (col < 0 || col >= ths.length) { return; }
    var numeric = ths[col].classList.contains('num');
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var sign = dir === 'asc' ? 1 : -1;
    var keyed = rows.map(function (r, i) {
      return { row: r, key: cellKey(r.cells[col], numeric), at: i };
    });
    keyed.sort(function (a, b) {
      // Missing figures last, whichever the direction.
      if (a.key === null || b.key === null) {
        if (a.key === b.key) { return a.at - b.at; }
        return a.key === null ? 1 : -1;
      }
      var c = numeric ? a.key - b.key
        : a.key.localeCompare(b.key, undefined, { numeric: true });
      return c !== 0 ? sign * c : a.at - b.at;
    });
    var frag = document.createDocumentFragment();
    keyed.forEach(function (k) { frag.appendChild(k.row); });
    body.appendChild(frag);
    for (var i = 0; i < ths.length; i++) { ths[i].removeAttribute('aria-sort'); }
    ths[col].setAttribute('aria-sort', dir === 'asc' ? 'ascending' : 'descending');
  }

  function columnOf(table, key) {
    var ths = table.tHead.rows[0].cells;
    for (var i = 0; i < ths.length; i++) {
      if (ths[i].getAttribute('data-k') === key) { return i; }
    }
    return -1;
  }

  var tables = document.querySelectorAll('table.sortable');
  Array.prototype.forEach.call(tables, function (table) {
    var ths = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(ths, function (th, col) {
      function go() {
        var now = th.getAttribute('aria-sort');
        var dir;
        if (now === 'descending') { dir = 'asc'; }
        else if (now === 'ascending') { dir = 'desc'; }
        else { dir = th.classList.contains('num') ? 'desc' : 'asc'; }
        sortTable(table, col, dir);
      }
      th.addEventListener('click', go);
      th.addEventListener('keydown', function (e) {
        if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); go(); }
      });
    });
  });

  // #sort=TABLE:COLUMN:asc|desc[,TABLE:COLUMN:asc|desc...]
  function sortFromHash() {
    var m = /^#sort=(.*)$/.exec(location.hash);
    if (!m) { return; }
    decodeURIComponent(m[1]).split(',').forEach(function (spec) {
      var p = spec.split(':');
      var table = null;
      Array.prototype.forEach.call(tables, function (t) {
        if (t.getAttribute('data-table') === p[0]) { table = t; }
      });
      if (!table) { return; }
      var col = columnOf(table, p[1]);
      if (col >= 0) { sortTable(table, col, p[2] === 'asc' ? 'asc' : 'desc'); }
    });
  }
  sortFromHash();
  window.addEventListener('hashchange', sortFromHash);

  // Heat maps: zoom the SVG's viewBox around a point, move it by dragging.
  Array.prototype.forEach.call(document.querySelectorAll('figure.zoom'), function (fig) {
    var svg = fig.querySelector('svg');
    if (!svg) { return; }
    var whole = svg.getAttribute('viewBox').split(/\s+/).map(Number);
    var box = whole.slice();
    function show() {
      svg.setAttribute('viewBox', box.map(function (v) { return v.toFixed(2); }).join(' '));
    }
    function clamp() {
      box[2] = Math.min(box[2], whole[2]);
      box[3] = Math.min(box[3], whole[3]);
      box[0] = Math.max(whole[0], Math.min(box[0], whole[0] + whole[2] - box[2]));
      box[1] = Math.max(whole[1], Math.min(box[1], whole[1] + whole[3] - box[3]));
    }
    // Zoom by `f` (below 1: in) keeping the point (fx, fy), as fractions
    // of the view, where it is.
    function zoom(f, fx, fy) {
      var w = Math.max(box[2] * f, whole[2] / 64);
      var hgt = w * whole[3] / whole[2];
      box[0] += (box[2] - w) * fx;
      box[1] += (box[3] - hgt) * fy;
      box[2] = w;
      box[3] = hgt;
      clamp();
      show();
    }
    function where(e) {
      var r = svg.getBoundingClientRect();
      return [(e.clientX - r.left) / r.width, (e.clientY - r.top) / r.height];
    }
    svg.addEventListener('wheel', function (e) {
      e.preventDefault();
      var p = where(e);
      zoom(e.deltaY < 0 ? 0.8 : 1.25, p[0], p[1]);
    }, { passive: false });
    var drag = null;
    svg.addEventListener('pointerdown', function (e) {
      drag = { x: e.clientX, y: e.clientY, box: box.slice() };
      svg.setPointerCapture(e.pointerId);
      svg.classList.add('dragging');
    });
    svg.addEventListener('pointermove', function (e) {
      if (!drag) { return; }
      var r = svg.getBoundingClientRect();
      box[0] = drag.box[0] - (e.clientX - drag.x) * box[2] / r.width;
      box[1] = drag.box[1] - (e.clientY - drag.y) * box[3] / r.height;
      clamp();
      show();
    });
    function end() { drag = null; svg.classList.remove('dragging'); }
    svg.addEventListener('pointerup', end);
    svg.addEventListener('pointercancel', end);
    Array.prototype.forEach.call(fig.querySelectorAll('button[data-zoom]'), function (b) {
      b.addEventListener('click', function () {
        var what = b.getAttribute('data-zoom');
        if (what === 'in') { zoom(0.5, 0.5, 0.5); }
        else if (what === 'out') { zoom(2, 0.5, 0.5); }
        else { box = whole.slice(); show(); }
      });
    });
  });
}());
