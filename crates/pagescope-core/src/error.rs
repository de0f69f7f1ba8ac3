//! The error type of pagescope's libraries.
//!
//! Library code returns these typed errors; the binary adds context with
//! `anyhow` and turns them into one line and an exit code.

use std::path::PathBuf;

/// What can go wrong reading the kernel's interfaces or a recording.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller lacks a privilege (usually CAP_SYS_ADMIN or root).
    #[error("{path}: permission denied ({needs})")]
    PermissionDenied {
        /// The file or interface that refused.
        path: PathBuf,
        /// What would grant access.
        needs: String,
    },
    /// The object is gone: typically a process that exited mid-scan.
    #[error("{path}: not found")]
    NotFound {
        /// The path that vanished.
        path: PathBuf,
    },
    /// The running kernel lacks an interface.
    #[error("{what} is not supported here: {needs}")]
    Unsupported {
        /// The interface or feature.
        what: String,
        /// The kernel option or privilege that would provide it.
        needs: String,
    },
    /// A file's contents are not what they should be.
    #[error("{path}: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong, in words.
        why: String,
    },
    /// Any other I/O error, with the path it concerns. The underlying
    /// error is part of the message, not a separate source, so that a
    /// chain of contexts prints it once.
    #[error("{path}: {error}")]
    Io {
        /// The file or interface.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// SIGINT or SIGTERM asked the work to stop before it was done.
    #[error("interrupted")]
    Interrupted,
}

/// Result with pagescope's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error on `path`, mapping the kinds that have a meaning
    /// of their own (ENOENT and ESRCH: gone; EACCES and EPERM: privilege).
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        let path = path.into();
        match source.raw_os_error() {
            Some(2 /* ENOENT */) | Some(3 /* ESRCH */) => Error::NotFound { path },
            Some(1 /* EPERM */) | Some(13 /* EACCES */) => Error::PermissionDenied {
                path,
                needs: "run as root (CAP_SYS_ADMIN)".into(),
            },
            _ => Error::Io {
                path,
                error: source,
            },
        }
    }

    /// Builds a [`Error::Corrupt`].
    pub fn corrupt(path: impl Into<PathBuf>, why: impl Into<String>) -> Error {
        Error::Corrupt {
            path: path.into(),
            why: why.into(),
        }
    }

    /// True when the error means the process went away while being read.
    pub fn is_gone(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }
}
