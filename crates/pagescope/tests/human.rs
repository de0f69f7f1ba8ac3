//! What a person at a terminal gets: sizes in KiB, MiB and GiB checked
//! against the kernel's accounting, no kernel thread unless asked for,
//! shell completions that complete, and man pages that `man` reads.

#[macro_use]
mod util;

use std::process::Command;
use util::*;

/// The cell of `column` in `row`, a line of an aligned table whose
/// numbers are right-aligned under their titles (a cell may hold a space,
/// as in `256.0 MiB`; cells are apart by at least two).
fn cell<'a>(header: &str, row: &'a str, column: &str) -> &'a str {
    let at = header
        .split("  ")
        .scan(0, |pos, part| {
            let start = *pos;
            *pos += part.len() + 2;
            Some((start, part))
        })
        .find(|(_, part)| part.trim() == column)
        .map(|(start, part)| start + part.len())
        .unwrap_or_else(|| panic!("no column {column} in {header:?}"));
    row[..at].rsplit("  ").next().unwrap().trim()
}

/// `256.3 MiB` in bytes.
fn bytes_of(human: &str) -> f64 {
    let (n, unit) = human.split_once(' ').unwrap_or((human, "B"));
    let n: f64 = n.parse().unwrap_or_else(|_| panic!("{human:?}"));
    let scale = match unit {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        other => panic!("unit {other:?} in {human:?}"),
    };
    n * scale
}

/// `report processes` in a terminal's default units shows a held
/// 256 MiB buffer's RSS and PSS in MiB within 1% of smaps_rollup, and the
/// same figures in bytes with `--units bytes`.
#[test]
fn human_sizes_match_smaps_rollup() {
    let _serial = serial();
    let pt = Pagetest::start(&[], &["--size", "256M", "--mode", "anon", "--hold"], "done");
    let pid = pt.pid().to_string();
    let out = run_ok(&["report", "processes", "--pid", &pid]);
    let rollup = smaps_rollup(pt.pid());
    let text = String::from_utf8(out.stdout).unwrap();
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("PID"))
        .unwrap_or_else(|| panic!("no table: {text}"));
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{pid} ")))
        .unwrap_or_else(|| panic!("no row for {pid}: {text}"));
    for (column, key) in [("RSS", "Rss"), ("PSS", "Pss")] {
        let shown = cell(header, row, column);
        assert!(shown.ends_with(" MiB"), "{column} {shown:?}: {row}");
        assert_close(column, bytes_of(shown) / 1024.0, rollup[key] as f64, 1.0);
    }
    let out = run_ok(&["report", "processes", "--pid", &pid, "--units", "bytes"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("PID"))
        .unwrap();
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{pid} ")))
        .unwrap();
    let pss: f64 = cell(header, row, "PSS").parse().unwrap();
    assert_close("PSS in bytes", pss / 1024.0, rollup["Pss"] as f64, 1.0);
}

/// Whether the kernel says `pid` is a kernel thread: PF_KTHREAD in the
/// flags of /proc/PID/stat (field 9). `None` if it has gone.
fn is_kernel_thread(pid: u64) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let flags: u64 = after.split(' ').nth(6)?.parse().ok()?;
    Some(flags & 0x0020_0000 != 0)
}

/// The live `report processes` lists no kernel thread (as the kernel
/// tells them), in the table and in JSON; `--all` lists kthreadd, and so
/// does `--pid 2`.
#[test]
fn kernel_threads_hidden_unless_asked_for() {
    assert_eq!(is_kernel_thread(2), Some(true), "pid 2 is kthreadd");
    let report = report_json(&["report", "processes", "-f", "json"]);
    let rows = report["processes"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        let pid = r["pid"].as_u64().unwrap();
        assert_ne!(is_kernel_thread(pid), Some(true), "{r}");
        assert_eq!(r["kernel_thread"], false, "{r}");
    }
    assert!(report["kernel_threads_hidden"].as_u64().unwrap() >= 1);
    let table = run_ok(&["report", "processes"]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        !text.lines().any(|l| l.trim_start().starts_with("2 ")),
        "{text}"
    );
    for args in [&["--all"][..], &["--pid", "2"]] {
        let mut a = vec!["report", "processes", "-f", "json"];
        a.extend(args);
        let report = report_json(&a);
        assert_eq!(process_row(&report, 2)["kernel_thread"], true);
        assert!(report.get("kernel_threads_hidden").is_none(), "{report}");
    }
}

/// Runs `script` in bash and returns its standard output.
fn bash(script: &str) -> String {
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", script])
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "bash failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `pagescope completions bash` loads in bash and its function, called
/// as bash's completion would call it, completes `pagescope rep<TAB>` to
/// `report`, and `pagescope report proc<TAB>` to `processes`.
#[test]
fn bash_completes_subcommands_and_views() {
    let dir = tempfile::tempdir().unwrap();
    let script = temp_path(dir.path(), "pagescope.bash");
    let out = run_ok(&["completions", "bash"]);
    std::fs::write(&script, &out.stdout).unwrap();
    let complete = |words: &[&str]| -> Vec<String> {
        let line = words.join(" ");
        let words_arr: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let text = bash(&format!(
            "source '{script}'\n\
             spec=$(complete -p pagescope) || exit 3\n\
             func=$(sed -E 's/.* -F ([^ ]+) .*/\\1/' <<<\"$spec\")\n\
             COMP_WORDS=({words})\n\
             COMP_CWORD={cword}\n\
             COMP_LINE='{line}'\n\
             COMP_POINT=${{#COMP_LINE}}\n\
             COMP_TYPE=9\n\
             \"$func\" pagescope '{cur}' '{prev}' 2>/dev/null\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            words = words_arr.join(" "),
            cword = words.len() - 1,
            cur = words[words.len() - 1],
            prev = words[words.len() - 2],
        ));
        text.lines().map(|l| l.trim().to_string()).collect()
    };
    assert_eq!(complete(&["pagescope", "rep"]), ["report"]);
    assert_eq!(complete(&["pagescope", "report", "proc"]), ["processes"]);
    let units = complete(&["pagescope", "report", "processes", "--units", ""]);
    assert_eq!(units, ["human", "bytes", "pages"]);
}

/// The zsh and fish scripts name every subcommand (no zsh or fish here
/// to load them).
#[test]
fn zsh_and_fish_completions_name_the_subcommands() {
    for shell in ["zsh", "fish"] {
        let out = run_ok(&["completions", shell]);
        let text = String::from_utf8(out.stdout).unwrap();
        for sub in ["snapshot", "report", "diff", "record", "trace", "analyze"] {
            assert!(text.contains(sub), "{shell}: no {sub}");
        }
    }
    let out = run(&[], &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `pagescope man -o DIR` writes a page per command; `man -l` of the
/// page of `report` shows the column legend.
#[test]
fn man_pages_show_the_column_legend() {
    let dir = tempfile::tempdir().unwrap();
    let mandir = temp_path(dir.path(), "man1");
    run_ok(&["man", "-o", &mandir]);
    let mut pages: Vec<String> = std::fs::read_dir(&mandir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    assert_eq!(
        pages,
        [
            "pagescope-analyze.1",
            "pagescope-completions.1",
            "pagescope-diff.1",
            "pagescope-export.1",
            "pagescope-man.1",
            "pagescope-record.1",
            "pagescope-report.1",
            "pagescope-serve.1",
            "pagescope-snapshot.1",
            "pagescope-top.1",
            "pagescope-trace.1",
            "pagescope.1"
        ]
    );
    let out = Command::new("man")
        .args(["-l", &format!("{mandir}/pagescope-report.1")])
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output()
        .expect("man runs (apt-get install man-db)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    // man may embolden with backspaces when it thinks it has a terminal.
    let text: String = text.replace("\u{8}", "");
    for legend in [
        "PSS          proportional set size",
        "SMAPS-RSS, SMAPS-PSS, SMAPS-USS, SMAPS-SWAP",
        "COUNTED-BY",
        "--units",
        "--all",
    ] {
        let squeezed = legend.split_whitespace().collect::<Vec<_>>().join(" ");
        let page = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(page.contains(&squeezed), "no {legend:?} in:\n{text}");
    }
}
