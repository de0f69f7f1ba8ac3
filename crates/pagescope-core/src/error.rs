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
    /// A system call failed on something other than a file (a process,
    /// a descriptor, a signal mask). The underlying error is part of the
    /// message, as in [`Error::Io`].
    #[error("{call}: {error}")]
    Sys {
        /// The call (`waitpid`, `ptrace SETREGS`), or the operation it
        /// served (`cannot attach to process 42`).
        call: String,
        /// What it returned.
        error: std::io::Error,
    },
    /// The caller may not use an interface that is not a file (the
    /// `userfaultfd` system call).
    #[error("{what}: permission denied ({needs})")]
    NotPermitted {
        /// The interface that refused.
        what: String,
        /// What would grant access.
        needs: String,
    },
    /// Something that is not a file failed or is missing: a mount, a
    /// thread pagescope started.
    #[error("{what}: {why}")]
    Failed {
        /// What failed.
        what: String,
        /// How, in words.
        why: String,
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

    /// Wraps the error of a failed system call (see [`Error::Sys`]).
    pub fn sys(call: impl Into<String>, error: std::io::Error) -> Error {
        Error::Sys {
            call: call.into(),
            error,
        }
    }

    /// Builds a [`Error::Corrupt`].
    pub fn corrupt(path: impl Into<PathBuf>, why: impl Into<String>) -> Error {
        Error::Corrupt {
            path: path.into(),
            why: why.into(),
        }
    }

    /// True when the error means the process went away while being read
    /// (or a system call on it found it gone: ESRCH, ENOENT).
    pub fn is_gone(&self) -> bool {
        match self {
            Error::NotFound { .. } => true,
            Error::Sys { error, .. } => matches!(error.raw_os_error(), Some(2 | 3)),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// A failed system call names the call and says what it returned;
    /// one on a process that went away is "gone", as a vanished file is.
    #[test]
    fn system_call_errors() {
        let e = Error::sys("waitpid", io::Error::from_raw_os_error(10));
        assert!(
            e.to_string().starts_with("waitpid: No child processes"),
            "{e}"
        );
        assert!(!e.is_gone());
        let e = Error::sys("ptrace SETREGS", io::Error::from_raw_os_error(3));
        assert!(
            e.to_string().starts_with("ptrace SETREGS: No such process"),
            "{e}"
        );
        assert!(e.is_gone());
        let e = Error::sys(
            "cannot run",
            io::Error::other("pagetestx: not found in PATH"),
        );
        assert_eq!(e.to_string(), "cannot run: pagetestx: not found in PATH");
        let e = Error::NotPermitted {
            what: "userfaultfd".into(),
            needs: "run it as root".into(),
        };
        assert_eq!(
            e.to_string(),
            "userfaultfd: permission denied (run it as root)"
        );
        let e = Error::Failed {
            what: "probe thread".into(),
            why: "it ended".into(),
        };
        assert_eq!(e.to_string(), "probe thread: it ended");
    }
}
