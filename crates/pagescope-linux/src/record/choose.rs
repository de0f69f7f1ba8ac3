//! Backend choice: the best backend this kernel has for the target, or
//! the one asked for.

use super::backend::{damon, fault, idle, refs};
use super::config::{Choice, RecordConfig, Target};
use super::probe::Probe;
use super::writes;
use pagescope_core::record::Backend;
use pagescope_core::{Error, Result};

/// Picks the backend: the best this kernel offers for the target, or the
/// one asked for if the kernel has it. Returns it with the reason.
///
/// `auto` picks `idle`, else `refs`: both exact. `damon` must be asked
/// for: its counts are estimates, and its kdamonds are a machine-wide
/// facility that pagescope takes only when told to.
pub(super) fn choose(
    config: &RecordConfig,
    root: &crate::Root,
    page_size: u64,
) -> Result<(Box<dyn Probe>, String)> {
    let system = matches!(config.target, Target::System);
    let named = matches!(config.target, Target::Pids(_) | Target::Command(_));
    let writes = || writes::Writes::new(&root.proc, page_size, system, named);
    let idle = || -> Result<Box<dyn Probe>> {
        Ok(Box::new(idle::Idle::new(
            root,
            page_size,
            config.block,
            system,
            writes(),
        )?))
    };
    let damon = || -> Result<Box<dyn Probe>> {
        Ok(Box::new(damon::Damon::new(
            root,
            page_size,
            config.block,
            config.interval,
            config.damon,
            system,
            writes(),
        )?))
    };
    let refs = || -> Box<dyn Probe> { Box::new(refs::Refs::new(&root.proc, page_size, writes())) };
    let damon_why = || format!("asked for; {}", config.damon.describe());
    match config.backend {
        Choice::Use(Backend::Refs) => Ok((refs(), "asked for".into())),
        Choice::Use(Backend::Idle) => match idle::unavailable(root, page_size) {
            Some(why) => Err(Error::Unsupported {
                what: "the idle backend".into(),
                needs: why,
            }),
            None => Ok((idle()?, "asked for".into())),
        },
        Choice::Use(Backend::Damon) => Ok((damon()?, damon_why())),
        Choice::Use(Backend::Fault) => match &config.target {
            Target::Pids(p) if p.len() > 1 => Err(refuse_fault("more than one running process")),
            Target::Command(_) | Target::Pids(_) => fault_probe(root, page_size, config),
            Target::Cgroup(_) => Err(refuse_fault("a cgroup")),
            Target::System => Err(refuse_fault("the whole machine")),
        },
        Choice::Auto => match idle::unavailable(root, page_size) {
            None => Ok((
                idle()?,
                "idle: exact per page, with physical and virtual placement".into(),
            )),
            Some(why) => Ok((refs(), format!("refs: {why}"))),
        },
    }
}

/// The fault backend for a launched command or one attached process, and
/// why.
fn fault_probe(
    root: &crate::Root,
    page_size: u64,
    config: &RecordConfig,
) -> Result<(Box<dyn Probe>, String)> {
    let probe = fault::probe(root, page_size, config.block, config.sample)?;
    let why = if config.sample < 1.0 {
        format!(
            "asked for; a fixed random {} of the pages moved out at each boundary, each \
             that comes back counting {:.1} pages",
            percent(config.sample),
            1.0 / config.sample
        )
    } else {
        "asked for".into()
    };
    Ok((probe, why))
}

/// `fraction` as a percentage to two significant digits: 10%, 0.15%.
fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    let decimals = (1 - p.log10().floor() as i32).max(0) as usize;
    format!("{p:.decimals$}%")
}

/// Why the fault backend can't record `what`.
fn refuse_fault(what: &str) -> Error {
    Error::Unsupported {
        what: format!("the fault backend for {what}"),
        needs: "a command pagescope launches (`pagescope record --backend fault -- CMD`) \
                or one running process (`--pid PID`)"
            .into(),
    }
}

/// A backend for a caller other than the recorder (`pagescope serve`):
/// the one asked for, over the processes named at each call, counting no
/// written pages (that would take soft-dirty clears, or a userfaultfd
/// injected into every process, which a monitor must not do). The caller
/// resets a process before its first collect, as the recorder does, and
/// stops no process: a reference between a backend's read and its clear
/// belongs to neither interval.
pub fn probe_for_processes(
    backend: Backend,
    root: &crate::Root,
    page_size: u64,
    block: u64,
    interval: std::time::Duration,
) -> Result<Box<dyn Probe>> {
    let writes = || writes::Writes::new(&root.proc, page_size, true, false);
    match backend {
        Backend::Refs => Ok(Box::new(refs::Refs::new(&root.proc, page_size, writes()))),
        Backend::Idle => match idle::unavailable(root, page_size) {
            Some(why) => Err(Error::Unsupported {
                what: "the idle backend".into(),
                needs: why,
            }),
            None => Ok(Box::new(idle::Idle::new(
                root,
                page_size,
                block,
                false,
                writes(),
            )?)),
        },
        Backend::Damon => Ok(Box::new(damon::Damon::new(
            root,
            page_size,
            block,
            interval,
            damon::DamonSettings::default(),
            false,
            writes(),
        )?)),
        Backend::Fault => Err(refuse_fault("every process of the machine")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentages_keep_two_digits() {
        assert_eq!(super::percent(0.1), "10%");
        assert_eq!(super::percent(1.0), "100%");
        assert_eq!(super::percent(0.003), "0.30%");
        assert_eq!(super::percent(0.0015), "0.15%");
        assert_eq!(super::percent(0.000001), "0.00010%");
    }
}
