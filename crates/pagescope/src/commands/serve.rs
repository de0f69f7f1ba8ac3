//! `pagescope serve`: resolves the address, binds it, starts the
//! collecting thread and the HTTP thread, and waits for SIGINT (exit 130)
//! or SIGTERM (exit 0, a service's normal end).

use crate::cli::{ServeArgs, ServeBackend};
use crate::serve::collect::{Collector, Settings};
use crate::serve::http::Latest;
use crate::serve::schedule::{self, Schedule};
use crate::serve::working_set::WorkingSet;
use crate::BadInput;
use anyhow::{Context, Result};
use pagescope_core::record::Backend;
use pagescope_linux::signals;
use pagescope_linux::Root;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `serve`; returns the exit code.
pub fn run(args: ServeArgs) -> Result<u8> {
    let listener = listen(&args.listen).context(BadInput)?;
    let addr = listener.local_addr().context("the address listened on")?;
    // Before any thread starts, so that every thread leaves the signals
    // to the main one.
    signals::block().context("blocking SIGINT and SIGTERM")?;
    let server = tiny_http::Server::from_listener(listener, None)
        .map_err(|e| anyhow::anyhow!("serving on {addr}: {e}"))?;
    let latest: Latest = Default::default();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    let settings = Settings {
        root: Root::default(),
        max_process_size: args.max_process_size,
        pagemap_above: args.pagemap_above,
        max_working_set_size: args.max_working_set_size,
        cmdline: args.cmdline,
        max_age: args.max_age,
    };
    let sched = Schedule {
        interval: args.interval,
        budget: args.budget / 100.0,
    };
    let backend = args.backend;
    let interval = args.interval;
    // A working set clears every process's accessed bits: one such
    // pagescope at a time (held until serve ends).
    let _machine = match backend {
        ServeBackend::None => None,
        _ => pagescope_linux::observer::ObserverLock::acquire_machine(&settings.root.run, "serve")
            .context("the working set")?,
    };
    let (latest, server) = (&latest, &server);
    std::thread::scope(|s| -> Result<u8> {
        s.spawn(move || {
            // The backend lives in this thread (record's probes stay in
            // the thread that made them).
            let ws = match working_set(backend, interval) {
                Ok(ws) => {
                    let _ = ready_tx.send(Ok(()));
                    ws
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            schedule::run(Collector::new(settings, ws), sched, latest, &stop_rx);
        });
        if let Ok(Err(e)) = ready_rx.recv() {
            return Err(e);
        }
        s.spawn(move || crate::serve::http::serve(server, latest));
        eprintln!("pagescope serve: http://{addr}/metrics");
        let code = loop {
            match signals::wait(Duration::from_secs(3600)) {
                Some(sig) if signals::is_interrupt(sig) => break 130,
                Some(sig) if signals::is_stop(sig) => break 0,
                _ => {}
            }
        };
        drop(stop_tx);
        server.unblock();
        Ok(code)
    })
}

/// Binds `--listen`: an address and port, or a host name and port. A
/// name is resolved (/etc/hosts, DNS), and the first of its addresses
/// that can be bound is: `localhost:9464` listens on one loopback
/// address, as a numeric address does.
fn listen(listen: &str) -> Result<TcpListener> {
    let example = "e.g. 127.0.0.1:9464, [::1]:9464 or localhost:9464";
    let addrs: Vec<SocketAddr> = match listen.parse::<SocketAddr>() {
        Ok(addr) => vec![addr],
        Err(_) => {
            let Some((host, port)) = listen.rsplit_once(':') else {
                anyhow::bail!(
                    "--listen {listen:?}: not an address or host name and port ({example})"
                );
            };
            let Ok(port) = port.parse::<u16>() else {
                anyhow::bail!(
                    "--listen {listen:?}: {port:?} is not a port, 0 to 65535 ({example})"
                );
            };
            if host.is_empty() {
                anyhow::bail!("--listen {listen:?}: no address or host name ({example})");
            }
            let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                Some(h) => h,
                None if host.contains(':') => anyhow::bail!(
                    "--listen {listen:?}: an IPv6 address goes in brackets, before the port \
                     ({example})"
                ),
                None => host,
            };
            (host, port)
                .to_socket_addrs()
                .map_err(|e| anyhow::anyhow!("--listen {listen:?}: {host} does not resolve: {e}"))?
                .collect()
        }
    };
    if addrs.is_empty() {
        anyhow::bail!("--listen {listen:?}: the name has no address");
    }
    // Each address in turn; the last one's error if none can be bound.
    TcpListener::bind(&addrs[..]).map_err(|e| {
        let tried: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
        anyhow::anyhow!("cannot listen on {}: {e}", tried.join(" or "))
    })
}

/// The working-set backend asked for.
fn working_set(backend: ServeBackend, interval: Duration) -> Result<WorkingSet> {
    let probe = |b: Backend| -> Result<WorkingSet> {
        let root = Root::default();
        let page_size = pagescope_linux::system::page_size();
        let probe =
            pagescope_linux::record::probe_for_processes(b, &root, page_size, 64 << 20, interval)
                .with_context(|| format!("--backend {}", b.name()))?;
        Ok(WorkingSet::Probe {
            probe,
            known: Default::default(),
        })
    };
    match backend {
        ServeBackend::None => Ok(WorkingSet::None),
        ServeBackend::Refs => Ok(WorkingSet::refs()),
        ServeBackend::Idle => probe(Backend::Idle),
        ServeBackend::Damon => probe(Backend::Damon),
    }
}
