//! pagescope's pure core.
//!
//! Everything here works on data, never on the live system: the data model
//! of a snapshot ([`model`]), the typed bit layouts of the kernel's page
//! interfaces ([`pagemap`], [`kpageflags`]), parsers of `/proc` and sysfs
//! text ([`parse`]), the recording format ([`format`]) and the analyses
//! behind the reports ([`analysis`]). It compiles and tests on any OS, so a
//! snapshot taken on one machine is analysed on another by the same code.
//! All reads of the live system live in the `pagescope-linux` crate.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod analysis;
pub mod error;
pub mod evict;
pub mod format;
pub mod kpageflags;
pub mod model;
pub mod pagemap;
pub mod parse;
pub mod physclass;
pub mod record;
pub mod sample;
pub mod trace;
pub mod units;

pub use error::{Error, Result};

/// An end record's reason followed by its notes, as one line
/// (`reason; note; note`): how reports print it, and what version 1 of
/// the format stored.
pub(crate) fn end_line(
    reason: &impl std::fmt::Display,
    notes: &[impl std::fmt::Display],
) -> String {
    let mut line = reason.to_string();
    for n in notes {
        line.push_str("; ");
        line.push_str(&n.to_string());
    }
    line
}
