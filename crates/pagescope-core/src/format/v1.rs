//! Records of format version 1 that version 2 changed: the end records
//! of recordings and traces, whose reason (with any notes appended) was
//! one string. Readers decode them as written and parse the string into
//! the typed reason and notes; text that is not one of the forms
//! pagescope wrote is kept as written (an `Other` reason), so that the
//! reason reads back exactly as it was.

use crate::record::{self, RecordEnd};
use crate::trace::{self, TraceEnd};
use serde::Deserialize;

/// A recording's end record, version 1.
#[derive(Deserialize)]
pub(crate) struct RecordEndV1 {
    intervals: u64,
    reason: String,
    overruns: u64,
}

impl RecordEndV1 {
    /// The record as version 2 holds it.
    pub(crate) fn upgrade(self) -> RecordEnd {
        let v1 = self;
        let (reason, notes) = record_reason(&v1.reason);
        RecordEnd {
            intervals: v1.intervals,
            reason,
            notes,
            overruns: v1.overruns,
        }
    }
}

/// A trace's end record, version 1.
#[derive(Deserialize)]
pub(crate) struct TraceEndV1 {
    references: u64,
    evictions: u64,
    unevictable: u64,
    reason: String,
}

impl TraceEndV1 {
    /// The record as version 2 holds it.
    pub(crate) fn upgrade(self) -> TraceEnd {
        let v1 = self;
        let (reason, notes) = trace_reason(&v1.reason);
        TraceEnd {
            references: v1.references,
            evictions: v1.evictions,
            unevictable: v1.unevictable,
            reason,
            notes,
        }
    }
}

/// The reason and notes of a version-1 recording's `reason`: `exited`,
/// `duration` or `interrupted`, each perhaps followed by `; letting the
/// program go: ERROR`, or `error: ERROR` perhaps followed by `; the
/// launched command was killed`.
pub(crate) fn record_reason(text: &str) -> (record::EndReason, Vec<record::EndNote>) {
    use record::{EndNote, EndReason};
    let head = |h: &str| match h {
        "exited" => Some(EndReason::Exited),
        "duration" => Some(EndReason::Duration),
        "interrupted" => Some(EndReason::Interrupted),
        _ => None,
    };
    let (reason, notes) = if let Some(r) = head(text) {
        (r, vec![])
    } else if let Some(e) = text.strip_prefix("error: ") {
        match e.strip_suffix("; the launched command was killed") {
            Some(e) => (EndReason::Error(e.into()), vec![EndNote::LaunchedKilled]),
            None => (EndReason::Error(e.into()), vec![]),
        }
    } else {
        let let_go = text.split_once("; letting the program go: ");
        match let_go.and_then(|(h, e)| Some((head(h)?, e))) {
            Some((r, e)) => (r, vec![EndNote::NotLetGo(e.into())]),
            None => (EndReason::Other(text.into()), vec![]),
        }
    };
    let end = RecordEnd {
        reason,
        notes,
        ..RecordEnd::default()
    };
    // Read back exactly as written, or kept as written.
    if end.why() == text {
        (end.reason, end.notes)
    } else {
        (EndReason::Other(text.into()), vec![])
    }
}

/// The reason and notes of a version-1 trace's `reason`: `exited`,
/// `interrupted: the program was detached and runs on` or `stopped by an
/// error: ERROR`, each perhaps followed by `; no page reference was
/// caught (...)`.
pub(crate) fn trace_reason(text: &str) -> (trace::EndReason, Vec<trace::EndNote>) {
    use trace::{EndNote, EndReason};
    let none_caught = format!("; {}", EndNote::NoReference);
    let (body, notes) = match text.strip_suffix(&none_caught) {
        Some(body) => (body, vec![EndNote::NoReference]),
        None => (text, vec![]),
    };
    let reason = if body == EndReason::Exited.to_string() {
        EndReason::Exited
    } else if body == EndReason::Interrupted.to_string() {
        EndReason::Interrupted
    } else if let Some(e) = body.strip_prefix("stopped by an error: ") {
        EndReason::Error(e.into())
    } else {
        EndReason::Other(body.into())
    };
    let end = TraceEnd {
        reason,
        notes,
        ..TraceEnd::default()
    };
    if end.why() == text {
        (end.reason, end.notes)
    } else {
        (EndReason::Other(text.into()), vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn record_reasons_pagescope_wrote() {
        use record::EndNote::*;
        use record::EndReason::{Duration, Error, Exited, Interrupted, Other};
        let cases = [
            ("exited", Exited, vec![]),
            ("duration", Duration, vec![]),
            ("interrupted", Interrupted, vec![]),
            (
                "error: /proc/1/smaps: x; y",
                Error("/proc/1/smaps: x; y".into()),
                vec![],
            ),
            (
                "error: ptrace: gone; the launched command was killed",
                Error("ptrace: gone".into()),
                vec![LaunchedKilled],
            ),
            (
                "exited; letting the program go: ptrace: a; b",
                Exited,
                vec![NotLetGo("ptrace: a; b".into())],
            ),
            (
                "interrupted; letting the program go: x",
                Interrupted,
                vec![NotLetGo("x".into())],
            ),
            ("", Other("".into()), vec![]),
            ("exited early", Other("exited early".into()), vec![]),
            (
                "stopped; letting the program go: x",
                Other("stopped; letting the program go: x".into()),
                vec![],
            ),
        ];
        for (text, reason, notes) in cases {
            assert_eq!(record_reason(text), (reason, notes), "{text}");
        }
    }

    #[test]
    fn trace_reasons_pagescope_wrote() {
        use trace::EndNote::NoReference;
        use trace::EndReason::{Error, Exited, Interrupted, Other};
        let none = "; no page reference was caught (the program touched no traced page, or \
                    something else held its pages: another userfaultfd, mlock)";
        let cases = [
            ("exited".to_string(), Exited, vec![]),
            (format!("exited{none}"), Exited, vec![NoReference]),
            (
                "interrupted: the program was detached and runs on".into(),
                Interrupted,
                vec![],
            ),
            (
                format!("interrupted: the program was detached and runs on{none}"),
                Interrupted,
                vec![NoReference],
            ),
            (
                "stopped by an error: waitpid: x; y".into(),
                Error("waitpid: x; y".into()),
                vec![],
            ),
            (
                format!("stopped by an error: e{none}"),
                Error("e".into()),
                vec![NoReference],
            ),
            ("interrupted".into(), Other("interrupted".into()), vec![]),
            (format!("odd{none}"), Other("odd".into()), vec![NoReference]),
        ];
        for (text, reason, notes) in cases {
            assert_eq!(trace_reason(&text), (reason, notes), "{text}");
        }
    }

    proptest! {
        /// Whatever a version-1 file says, it reads back as it was.
        #[test]
        fn any_reason_reads_back_as_written(
            text in "(exited|duration|interrupted|error: |stopped by an error: |; |letting the program go: |the launched command was killed|no page reference|[a-z :;]){0,8}"
        ) {
            let (reason, notes) = record_reason(&text);
            prop_assert_eq!(RecordEnd { reason, notes, ..RecordEnd::default() }.why(), text.clone());
            let (reason, notes) = trace_reason(&text);
            prop_assert_eq!(TraceEnd { reason, notes, ..TraceEnd::default() }.why(), text);
        }
    }
}

/// The fuzz seeds (`fuzz/seeds/`) are files written by pagescope, most
/// of them at version 1: they read whole, with their reasons typed.
#[cfg(test)]
mod seeds {
    use crate::format::{read_record, read_trace, Completeness};
    use std::path::Path;

    const RECORDS: [&[u8]; 4] = [
        include_bytes!("../../../../fuzz/seeds/read_record/refs.rec"),
        include_bytes!("../../../../fuzz/seeds/read_record/refs-uncompressed.rec"),
        include_bytes!("../../../../fuzz/seeds/read_record/fault-sampled.rec"),
        include_bytes!("../../../../fuzz/seeds/read_record/fault-sampled-uncompressed.rec"),
    ];
    const TRACES: [&[u8]; 2] = [
        include_bytes!("../../../../fuzz/seeds/read_trace/pagetest.trace"),
        include_bytes!("../../../../fuzz/seeds/read_trace/pagetest-uncompressed.trace"),
    ];

    /// Seeds written at version 2, by `fuzz/make-corpus.sh`'s commands.
    const V2: [(&[u8], bool); 4] = [
        (
            include_bytes!("../../../../fuzz/seeds/read_record/refs-v2.rec"),
            true,
        ),
        (
            include_bytes!("../../../../fuzz/seeds/read_record/refs-v2-uncompressed.rec"),
            true,
        ),
        (
            include_bytes!("../../../../fuzz/seeds/read_trace/pagetest-v2.trace"),
            false,
        ),
        (
            include_bytes!("../../../../fuzz/seeds/read_trace/pagetest-v2-uncompressed.trace"),
            false,
        ),
    ];

    #[test]
    fn version_2_seeds_read() {
        for (bytes, record) in V2 {
            assert_eq!(bytes[8..10], [2, 0], "a version-2 file");
            let end = if record {
                let mut r = crate::analysis::temporal::Recording::default();
                let done = read_record(bytes, Path::new("r"), &mut r).unwrap();
                assert_eq!(done, Completeness::Complete);
                r.end.unwrap().why()
            } else {
                let mut t = crate::analysis::refs::RefStats::default();
                let done = read_trace(bytes, Path::new("t"), &mut t).unwrap();
                assert_eq!(done, Completeness::Complete);
                t.maps.end.unwrap().why()
            };
            assert_eq!(end, "exited");
        }
    }

    #[test]
    fn version_1_recordings_read_with_typed_reasons() {
        for bytes in RECORDS {
            assert_eq!(bytes[8..10], [1, 0], "a version-1 file");
            let mut r = crate::analysis::temporal::Recording::default();
            let done = read_record(bytes, Path::new("r"), &mut r).unwrap();
            assert_eq!(done, Completeness::Complete);
            let end = r.end.unwrap();
            assert_eq!(end.reason, crate::record::EndReason::Exited);
            assert_eq!((end.why(), end.notes), ("exited".to_string(), vec![]));
        }
    }

    #[test]
    fn version_1_traces_read_with_typed_reasons() {
        for bytes in TRACES {
            assert_eq!(bytes[8..10], [1, 0], "a version-1 file");
            let mut t = crate::analysis::refs::RefStats::default();
            let done = read_trace(bytes, Path::new("t"), &mut t).unwrap();
            assert_eq!(done, Completeness::Complete);
            let end = t.maps.end.unwrap();
            assert_eq!(end.reason, crate::trace::EndReason::Exited);
            assert_eq!((end.why(), end.notes), ("exited".to_string(), vec![]));
        }
    }
}
