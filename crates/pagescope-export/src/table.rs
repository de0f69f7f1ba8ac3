//! One Parquet file per table, written as its rows stream in: rows are
//! gathered into Arrow arrays of at most [`BATCH_ROWS`] rows, each batch
//! goes to the Parquet writer, which closes a zstd-compressed row group
//! every [`GROUP_ROWS`] rows. What a table holds in memory is therefore
//! bounded by one batch and one row group's encoded pages, whatever the
//! input holds.
//!
//! Every row starts with the columns that tie it to its machine and
//! moment ([`Stamp`]): `host` (left out of the files of a partitioned
//! export, whose directory `host=NAME` carries it), `boot_id` and
//! `taken_at`.

use crate::{ExportError, Result};
use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int32Builder, ListBuilder, MapBuilder, StringBuilder,
    TimestampMicrosecondBuilder, UInt16Builder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows gathered before they go to the Parquet writer.
pub const BATCH_ROWS: usize = 64 * 1024;
/// Rows per row group.
pub const GROUP_ROWS: usize = 1024 * 1024;

/// The type of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// Unsigned 64-bit (addresses, frame numbers, counts).
    U64,
    /// Unsigned 32-bit (pids, ids).
    U32,
    /// Unsigned 16-bit (NUMA nodes, swap types).
    U16,
    /// Signed 32-bit (exit statuses).
    I32,
    /// Double.
    F64,
    /// Boolean.
    Bool,
    /// UTF-8 text.
    Str,
    /// A moment: microseconds since the Unix epoch, UTC (Parquet's
    /// `TIMESTAMP(MICROS, true)`, which every engine reads; exact
    /// nanosecond offsets are integer columns of their own).
    Time,
    /// A list of texts (command lines, notes).
    Strs,
    /// A map from text to an unsigned 64-bit value (meminfo).
    Map,
}

/// A column: name, type, and whether it may be null.
#[derive(Clone, Copy, Debug)]
pub struct Col {
    name: &'static str,
    ty: Ty,
    nullable: bool,
}

/// A column that always has a value.
pub const fn col(name: &'static str, ty: Ty) -> Col {
    Col {
        name,
        ty,
        nullable: false,
    }
}

/// A column that may be null (not known, or not applicable).
pub const fn opt(name: &'static str, ty: Ty) -> Col {
    Col {
        name,
        ty,
        nullable: true,
    }
}

/// One value of a row, in its column's order.
#[derive(Clone, Copy, Debug)]
pub enum V<'a> {
    /// [`Ty::U64`].
    U64(Option<u64>),
    /// [`Ty::U32`].
    U32(Option<u32>),
    /// [`Ty::U16`].
    U16(Option<u16>),
    /// [`Ty::I32`].
    I32(Option<i32>),
    /// [`Ty::F64`].
    F64(Option<f64>),
    /// [`Ty::Bool`].
    Bool(Option<bool>),
    /// [`Ty::Str`].
    Str(Option<&'a str>),
    /// [`Ty::Time`], given in nanoseconds since the epoch.
    TimeNs(Option<u64>),
    /// [`Ty::Strs`].
    Strs(Option<&'a [String]>),
    /// [`Ty::Map`].
    Map(&'a [(String, u64)]),
}

/// What ties every row of an export to its machine and moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stamp {
    /// The host name (`None`: the file does not say, and none was given).
    pub host: Option<String>,
    /// The boot id (`None`: unknown).
    pub boot_id: Option<String>,
    /// When the snapshot was taken, or the recording or trace started,
    /// ns since the Unix epoch.
    pub taken_at_ns: u64,
}

/// Arrow's type for a column type.
fn data_type(ty: Ty) -> DataType {
    match ty {
        Ty::U64 => DataType::UInt64,
        Ty::U32 => DataType::UInt32,
        Ty::U16 => DataType::UInt16,
        Ty::I32 => DataType::Int32,
        Ty::F64 => DataType::Float64,
        Ty::Bool => DataType::Boolean,
        Ty::Str => DataType::Utf8,
        Ty::Time => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        Ty::Strs => DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        Ty::Map => arrow_array::Array::data_type(&map_builder().finish()).clone(),
    }
}

fn map_builder() -> MapBuilder<StringBuilder, UInt64Builder> {
    MapBuilder::new(None, StringBuilder::new(), UInt64Builder::new())
}

/// A column's builder.
enum Builder {
    U64(UInt64Builder),
    U32(UInt32Builder),
    U16(UInt16Builder),
    I32(Int32Builder),
    F64(Float64Builder),
    Bool(BooleanBuilder),
    Str(StringBuilder),
    Time(TimestampMicrosecondBuilder),
    Strs(ListBuilder<StringBuilder>),
    Map(MapBuilder<StringBuilder, UInt64Builder>),
}

impl Builder {
    fn new(ty: Ty) -> Builder {
        match ty {
            Ty::U64 => Builder::U64(UInt64Builder::new()),
            Ty::U32 => Builder::U32(UInt32Builder::new()),
            Ty::U16 => Builder::U16(UInt16Builder::new()),
            Ty::I32 => Builder::I32(Int32Builder::new()),
            Ty::F64 => Builder::F64(Float64Builder::new()),
            Ty::Bool => Builder::Bool(BooleanBuilder::new()),
            Ty::Str => Builder::Str(StringBuilder::new()),
            Ty::Time => Builder::Time(TimestampMicrosecondBuilder::new().with_timezone("UTC")),
            Ty::Strs => Builder::Strs(ListBuilder::new(StringBuilder::new())),
            Ty::Map => Builder::Map(map_builder()),
        }
    }

    /// Appends `v`; false if it is not of the column's type.
    fn push(&mut self, v: V<'_>) -> bool {
        match (self, v) {
            (Builder::U64(b), V::U64(x)) => b.append_option(x),
            (Builder::U32(b), V::U32(x)) => b.append_option(x),
            (Builder::U16(b), V::U16(x)) => b.append_option(x),
            (Builder::I32(b), V::I32(x)) => b.append_option(x),
            (Builder::F64(b), V::F64(x)) => b.append_option(x),
            (Builder::Bool(b), V::Bool(x)) => b.append_option(x),
            (Builder::Str(b), V::Str(x)) => b.append_option(x),
            (Builder::Time(b), V::TimeNs(x)) => b.append_option(x.map(micros)),
            (Builder::Strs(b), V::Strs(x)) => match x {
                Some(items) => {
                    for s in items {
                        b.values().append_value(s);
                    }
                    b.append(true);
                }
                None => b.append(false),
            },
            (Builder::Map(b), V::Map(items)) => {
                for (k, v) in items {
                    b.keys().append_value(k);
                    b.values().append_value(*v);
                }
                if b.append(true).is_err() {
                    return false;
                }
            }
            _ => return false,
        }
        true
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::U64(b) => Arc::new(b.finish()),
            Builder::U32(b) => Arc::new(b.finish()),
            Builder::U16(b) => Arc::new(b.finish()),
            Builder::I32(b) => Arc::new(b.finish()),
            Builder::F64(b) => Arc::new(b.finish()),
            Builder::Bool(b) => Arc::new(b.finish()),
            Builder::Str(b) => Arc::new(b.finish()),
            Builder::Time(b) => Arc::new(b.finish()),
            Builder::Strs(b) => Arc::new(b.finish()),
            Builder::Map(b) => Arc::new(b.finish()),
        }
    }
}

/// Nanoseconds since the epoch as the microseconds a [`Ty::Time`]
/// column holds (rounded down; past `i64::MAX` µs, the largest).
fn micros(ns: u64) -> i64 {
    i64::try_from(ns / 1000).unwrap_or(i64::MAX)
}

/// One table being written: its file (under a temporary name until it is
/// complete), its schema and the rows not yet handed to the writer.
pub struct Table {
    name: &'static str,
    schema: SchemaRef,
    builders: Vec<Builder>,
    rows: usize,
    written: u64,
    stamp: Stamp,
    with_host: bool,
    writer: Option<ArrowWriter<File>>,
    tmp: PathBuf,
    path: PathBuf,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("written", &self.written)
            .finish()
    }
}

impl Table {
    /// Starts table `name` at `path` (written as a hidden temporary file
    /// beside it, renamed at [`Table::close`]; mode 0600), with the stamp
    /// columns and then `cols`. The host column is left out where the
    /// directory names it (`with_host` false).
    pub fn create(
        name: &'static str,
        path: PathBuf,
        cols: &[Col],
        stamp: &Stamp,
        with_host: bool,
    ) -> Result<Table> {
        let mut fields = Vec::new();
        if with_host {
            fields.push(Field::new("host", DataType::Utf8, true));
        }
        fields.push(Field::new("boot_id", DataType::Utf8, true));
        fields.push(Field::new("taken_at", data_type(Ty::Time), false));
        fields.extend(
            cols.iter()
                .map(|c| Field::new(c.name, data_type(c.ty), c.nullable)),
        );
        let schema = Arc::new(Schema::new(fields));
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".{file_name}.tmp-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| ExportError::io(&tmp, e))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(GROUP_ROWS))
            .set_created_by(format!("pagescope {}", env!("CARGO_PKG_VERSION")))
            .build();
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props))
            .map_err(|e| ExportError::parquet(&tmp, e))?;
        Ok(Table {
            name,
            builders: cols.iter().map(|c| Builder::new(c.ty)).collect(),
            schema,
            rows: 0,
            written: 0,
            stamp: stamp.clone(),
            with_host,
            writer: Some(writer),
            tmp,
            path,
        })
    }

    /// Appends one row: a value per column, in order.
    pub fn push(&mut self, row: &[V<'_>]) -> Result<()> {
        if row.len() != self.builders.len() {
            return Err(ExportError::Schema(format!(
                "table {}: a row of {} values for {} columns",
                self.name,
                row.len(),
                self.builders.len()
            )));
        }
        for (i, (b, v)) in self.builders.iter_mut().zip(row).enumerate() {
            if !b.push(*v) {
                return Err(ExportError::Schema(format!(
                    "table {}: value {v:?} for column {}",
                    self.name,
                    i + usize::from(self.with_host) + 2
                )));
            }
        }
        self.rows += 1;
        if self.rows >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands the gathered rows to the writer.
    fn flush(&mut self) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let n = self.rows;
        let mut columns: Vec<ArrayRef> = Vec::new();
        if self.with_host {
            let host = self.stamp.host.as_deref();
            columns.push(Arc::new(StringArray::from(vec![host; n])));
        }
        columns.push(Arc::new(StringArray::from(vec![
            self.stamp
                .boot_id
                .as_deref();
            n
        ])));
        columns.push(Arc::new(
            TimestampMicrosecondArray::from(vec![micros(self.stamp.taken_at_ns); n])
                .with_timezone("UTC"),
        ));
        columns.extend(self.builders.iter_mut().map(Builder::finish));
        let batch = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| ExportError::Schema(format!("table {}: {e}", self.name)))?;
        let writer = self.writer.as_mut().expect("open until closed");
        writer
            .write(&batch)
            .map_err(|e| ExportError::parquet(&self.tmp, e))?;
        self.written += n as u64;
        self.rows = 0;
        Ok(())
    }

    /// Writes what is left, closes the file and gives it its name.
    /// Returns the rows written.
    pub fn close(mut self) -> Result<u64> {
        self.flush()?;
        let writer = self.writer.take().expect("open until closed");
        writer
            .close()
            .map_err(|e| ExportError::parquet(&self.tmp, e))?;
        std::fs::rename(&self.tmp, &self.path).map_err(|e| ExportError::io(&self.path, e))?;
        Ok(self.written)
    }

    /// The table's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Where the table goes.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Table {
    /// A table not closed (the export failed) leaves no file behind.
    fn drop(&mut self) {
        if self.writer.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
