//! One table written as a hive-partitioned directory: `ROOT/host=H/date=D/part-N.parquet`,
//! a file per date the rows fall on (UTC, from the recording's wall clock), each in row
//! groups of [`ROW_GROUP_ROWS`], with the recording's key-value metadata in its footer.
//!
//! Owns: file names, the Parquet writer's properties, row groups. Must not: decide what a
//! row holds.

use std::{
    collections::BTreeMap,
    fs::File,
    io::BufWriter,
    path::{Path, PathBuf},
    sync::Arc,
};

use parquet::{
    basic::Compression,
    file::{
        metadata::KeyValue,
        properties::{WriterProperties, WriterVersion},
        writer::SerializedFileWriter,
    },
    schema::{parser::parse_message_type, types::Type},
};

use super::{
    ExportError,
    columns::{Cell, ColumnSpec, Columns},
};

/// Rows per row group: large enough for DuckDB to scan fast (it parallelizes by row group),
/// small enough that a buffered group of requests stays in tens of MB.
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

struct Part {
    path: PathBuf,
    writer: SerializedFileWriter<BufWriter<File>>,
    columns: Columns,
    rows: u64,
}

/// A table being written.
pub struct TableWriter {
    root: PathBuf,
    host: String,
    schema: Arc<Type>,
    specs: &'static [ColumnSpec],
    props: Arc<WriterProperties>,
    parts: BTreeMap<String, Part>,
    row_group_rows: usize,
}

/// A file written: its path and rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    pub rows: u64,
}

impl TableWriter {
    /// `root`: the table's directory (`DIR` or `DIR/idle`); `name`: the message type's name.
    pub fn new(
        root: &Path,
        name: &str,
        specs: &'static [ColumnSpec],
        host: &str,
        row_group_rows: usize,
    ) -> Result<TableWriter, ExportError> {
        let schema = parse_message_type(&super::columns::message_type(name, specs))
            .map_err(|e| ExportError::Parquet(root.to_path_buf(), e))?;
        let props = WriterProperties::builder()
            .set_writer_version(WriterVersion::PARQUET_1_0)
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("iosched-trace {}", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(TableWriter {
            root: root.to_path_buf(),
            host: host.to_string(),
            schema: Arc::new(schema),
            specs,
            props: Arc::new(props),
            parts: BTreeMap::new(),
            row_group_rows: row_group_rows.max(1),
        })
    }

    /// Lays a row into the file for `date`; a full row group is written.
    pub fn row(&mut self, date: &str, cells: &[Cell<'_>]) -> Result<(), ExportError> {
        let limit = self.row_group_rows;
        let part = self.part(date)?;
        part.columns.row(cells);
        if part.columns.rows() >= limit {
            part.flush()?;
        }
        Ok(())
    }

    /// The file for `date` (created, with its directory, on first use).
    fn part(&mut self, date: &str) -> Result<&mut Part, ExportError> {
        if !self.parts.contains_key(date) {
            let dir = self
                .root
                .join(format!("host={}", self.host))
                .join(format!("date={date}"));
            std::fs::create_dir_all(&dir).map_err(|e| ExportError::Io(dir.clone(), e))?;
            let path = free_part(&dir);
            let file = iosched_core::output_file::create(&path)
                .map_err(|e| ExportError::Io(path.clone(), e))?;
            let writer = SerializedFileWriter::new(
                BufWriter::with_capacity(1 << 20, file),
                self.schema.clone(),
                self.props.clone(),
            )
            .map_err(|e| ExportError::Parquet(path.clone(), e))?;
            self.parts.insert(
                date.to_string(),
                Part {
                    path,
                    writer,
                    columns: Columns::new(self.specs),
                    rows: 0,
                },
            );
        }
        Ok(self.parts.get_mut(date).expect("inserted above"))
    }

    /// Writes what is buffered and each file's footer with `metadata`.
    pub fn finish(self, metadata: &[(String, String)]) -> Result<Vec<Written>, ExportError> {
        let mut out = Vec::new();
        for (_, mut part) in self.parts {
            part.flush()?;
            for (k, v) in metadata {
                part.writer
                    .append_key_value_metadata(KeyValue::new(k.clone(), v.clone()));
            }
            let path = part.path.clone();
            part.writer
                .close()
                .map_err(|e| ExportError::Parquet(path.clone(), e))?;
            out.push(Written {
                path,
                rows: part.rows,
            });
        }
        Ok(out)
    }
}

impl Part {
    fn flush(&mut self) -> Result<(), ExportError> {
        let rows = self.columns.rows();
        if rows == 0 {
            return Ok(());
        }
        let err = |e| ExportError::Parquet(self.path.clone(), e);
        let mut rg = self.writer.next_row_group().map_err(err)?;
        self.columns.write(&mut rg).map_err(err)?;
        rg.close().map_err(err)?;
        self.rows += rows as u64;
        Ok(())
    }
}

/// `part-N.parquet` with the smallest N not taken in `dir`: another recording of the same
/// host and day goes beside the ones converted before.
fn free_part(dir: &Path) -> PathBuf {
    (0..)
        .map(|n| dir.join(format!("part-{n}.parquet")))
        .find(|p| !p.exists())
        .expect("some number is free")
}

/// The UTC date (`YYYY-MM-DD`) of a wall-clock time, ns since the epoch.
pub fn utc_date(realtime_ns: u64) -> String {
    // Days to civil date: H. Hinnant's algorithm (proleptic Gregorian).
    let days = (realtime_ns / 86_400_000_000_000) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
