//! Where an export's files go: `DIR/TABLE.parquet`, or with
//! [`Options::partition`] Hive-style `DIR/TABLE/host=NAME/KIND-NS.parquet`
//! (NS: when the file was taken, ns since the Unix epoch), so that the
//! exports of many machines and moments share one directory; and when an
//! existing output is refused.

use crate::table::{Col, Stamp, Table};
use crate::{ExportError, Result};
use std::path::{Path, PathBuf};

/// What an export is asked to do.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The output directory.
    pub dir: PathBuf,
    /// Hive-style directories per table and host, for exports of many
    /// machines in one directory.
    pub partition: bool,
    /// Write over an existing output: a non-empty directory (without
    /// `partition`: its tables are replaced, other files left), or this
    /// export's own files (with it).
    pub force: bool,
    /// The host name to put in every row, instead of the one the file
    /// names (files written before they named one have none).
    pub host: Option<String>,
}

/// What an export wrote.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// The kind of file (`snapshot`, `record`, `trace`).
    pub kind: &'static str,
    /// Per table: its name, its file and its rows.
    pub tables: Vec<(&'static str, PathBuf, u64)>,
    /// Whether the input was complete (not cut short).
    pub complete: bool,
    /// The host and boot the rows name.
    pub stamp: Stamp,
}

/// Checks and makes the output directory before anything is read:
/// without `partition`, a directory that holds anything is refused
/// unless `force`.
pub fn prepare(o: &Options) -> Result<()> {
    if !o.partition && !o.force {
        match std::fs::read_dir(&o.dir).map(|mut d| d.next().is_some()) {
            Ok(true) => {
                return Err(ExportError::Exists {
                    path: o.dir.clone(),
                    why: "not empty",
                })
            }
            Ok(false) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ExportError::io(&o.dir, e)),
        }
    }
    std::fs::create_dir_all(&o.dir).map_err(|e| ExportError::io(&o.dir, e))
}

/// A directory name's value as Hive writes it: characters that would
/// break a path or a `key=value` pair as `%XX`, and no value as
/// `__HIVE_DEFAULT_PARTITION__` (which engines read as null).
pub fn hive_value(v: Option<&str>) -> String {
    match v {
        None | Some("") => "__HIVE_DEFAULT_PARTITION__".into(),
        Some(v) => {
            let mut out = String::new();
            for b in v.bytes() {
                if b.is_ascii_alphanumeric()
                    || matches!(b, b'-' | b'_' | b'.') && v != "." && v != ".."
                {
                    out.push(b as char);
                } else {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            out
        }
    }
}

/// The tables of one export, opened together once the stamp is known.
#[derive(Debug, Default)]
pub struct Tables {
    tables: Vec<Table>,
}

impl Tables {
    /// Opens the tables `specs` (name and columns) of a file of `kind`.
    pub fn open(
        o: &Options,
        kind: &str,
        stamp: &Stamp,
        specs: &[(&'static str, &[Col])],
    ) -> Result<Tables> {
        let mut tables = Vec::new();
        for &(name, cols) in specs {
            let path = if o.partition {
                let dir = o
                    .dir
                    .join(name)
                    .join(format!("host={}", hive_value(stamp.host.as_deref())));
                std::fs::create_dir_all(&dir).map_err(|e| ExportError::io(&dir, e))?;
                dir.join(format!("{kind}-{}.parquet", stamp.taken_at_ns))
            } else {
                o.dir.join(format!("{name}.parquet"))
            };
            if !o.force && exists(&path) {
                return Err(ExportError::Exists {
                    path,
                    why: "exported already",
                });
            }
            tables.push(Table::create(name, path, cols, stamp, !o.partition)?);
        }
        Ok(Tables { tables })
    }

    /// Table number `i` (in the order of `specs`).
    pub fn get(&mut self, i: usize) -> &mut Table {
        &mut self.tables[i]
    }

    /// Closes every table, in order; what they wrote.
    pub fn close(self) -> Result<Vec<(&'static str, PathBuf, u64)>> {
        let mut out = Vec::new();
        for t in self.tables {
            let (name, path) = (t.name(), t.path().to_path_buf());
            out.push((name, path, t.close()?));
        }
        Ok(out)
    }
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_values() {
        assert_eq!(hive_value(Some("db-7.example")), "db-7.example");
        assert_eq!(hive_value(Some("a/b=c d")), "a%2Fb%3Dc%20d");
        assert_eq!(hive_value(Some("..")), "%2E%2E");
        assert_eq!(hive_value(None), "__HIVE_DEFAULT_PARTITION__");
        assert_eq!(hive_value(Some("")), "__HIVE_DEFAULT_PARTITION__");
    }
}
