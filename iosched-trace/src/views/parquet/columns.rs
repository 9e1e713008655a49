//! The two tables' columns, declared once: the Parquet schema is generated from them, rows
//! are laid into them, and docs/FLEET.md's schema tables are checked against them (tests).
//!
//! Owns: column names, types, nullability, and the buffers a row group is built in. Must
//! not: know what a request or an idle interval is (see [`super::rows`]).

use parquet::{
    data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type},
    file::writer::SerializedRowGroupWriter,
};

/// A column's Parquet type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// UTF-8 string (`binary (STRING)`), dictionary-encoded.
    Str,
    I32,
    I64,
    /// A list of 32-bit integers (the standard three-level LIST), never null, maybe empty.
    ListI32,
}

impl Kind {
    /// The type as docs/FLEET.md and DuckDB's `DESCRIBE` name it.
    pub fn sql(self) -> &'static str {
        match self {
            Kind::Str => "VARCHAR",
            Kind::I32 => "INTEGER",
            Kind::I64 => "BIGINT",
            Kind::ListI32 => "INTEGER[]",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnSpec {
    pub name: &'static str,
    pub kind: Kind,
    pub nullable: bool,
}

const fn col(name: &'static str, kind: Kind, nullable: bool) -> ColumnSpec {
    ColumnSpec {
        name,
        kind,
        nullable,
    }
}

/// One row per completed request (`part-N.parquet` under `host=H/date=D/`).
pub const REQUESTS: &[ColumnSpec] = &[
    col("device", Kind::Str, false),
    col("dev", Kind::Str, false),
    col("scheduler", Kind::Str, true),
    col("op", Kind::Str, false),
    col("flags", Kind::Str, false),
    col("sector", Kind::I64, false),
    col("bytes", Kind::I64, false),
    col("pid", Kind::I32, true),
    col("tid", Kind::I32, true),
    col("comm", Kind::Str, true),
    col("cgroup_id", Kind::I64, true),
    col("cgroup", Kind::Str, true),
    col("q_ns", Kind::I64, true),
    col("g_ns", Kind::I64, true),
    col("i_ns", Kind::I64, true),
    col("d_ns", Kind::I64, true),
    col("c_ns", Kind::I64, false),
    col("bios", Kind::I32, false),
    col("merges", Kind::I32, false),
    col("requeues", Kind::I32, false),
    col("error", Kind::I32, false),
];

/// One row per idling-waste interval (`idle/host=H/date=D/part-N.parquet`).
pub const IDLE: &[ColumnSpec] = &[
    col("device", Kind::Str, false),
    col("dev", Kind::Str, false),
    col("scheduler", Kind::Str, true),
    col("start_ns", Kind::I64, false),
    col("duration_ns", Kind::I64, false),
    col("after_tid", Kind::I32, true),
    col("after_comm", Kind::Str, true),
    col("after_cgroup_id", Kind::I64, true),
    col("after_cgroup", Kind::Str, true),
    col("waiting_tids", Kind::ListI32, false),
];

/// The Parquet message type of a table.
pub fn message_type(name: &str, specs: &[ColumnSpec]) -> String {
    let mut s = format!("message {name} {{\n");
    for c in specs {
        let rep = if c.nullable { "optional" } else { "required" };
        let line = match c.kind {
            Kind::Str => format!("  {rep} binary {} (STRING);\n", c.name),
            Kind::I32 => format!("  {rep} int32 {};\n", c.name),
            Kind::I64 => format!("  {rep} int64 {};\n", c.name),
            Kind::ListI32 => format!(
                "  {rep} group {} (LIST) {{ repeated group list {{ required int32 element; }} }}\n",
                c.name
            ),
        };
        s.push_str(&line);
    }
    s.push('}');
    s
}

enum Values {
    Str(Vec<ByteArray>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

struct Column {
    spec: ColumnSpec,
    values: Values,
    /// Definition levels (nullable columns and lists).
    defs: Vec<i16>,
    /// Repetition levels (lists).
    reps: Vec<i16>,
}

/// A row group being built: one buffer per column. Rows are laid in with [`Columns::row`],
/// one `put_*` per column in schema order.
pub struct Columns {
    cols: Vec<Column>,
    next: usize,
    rows: usize,
}

/// A value for one column of a row.
pub enum Cell<'a> {
    Str(Option<&'a str>),
    I32(Option<i32>),
    I64(Option<i64>),
    ListI32(&'a [i32]),
}

impl Columns {
    pub fn new(specs: &[ColumnSpec]) -> Columns {
        Columns {
            cols: specs
                .iter()
                .map(|&spec| Column {
                    spec,
                    values: match spec.kind {
                        Kind::Str => Values::Str(Vec::new()),
                        Kind::I32 | Kind::ListI32 => Values::I32(Vec::new()),
                        Kind::I64 => Values::I64(Vec::new()),
                    },
                    defs: Vec::new(),
                    reps: Vec::new(),
                })
                .collect(),
            next: 0,
            rows: 0,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Lays one row in: `cells` in schema order, one per column.
    pub fn row(&mut self, cells: &[Cell<'_>]) {
        assert_eq!(cells.len(), self.cols.len(), "one cell per column");
        for cell in cells {
            self.put(cell);
        }
        self.next = 0;
        self.rows += 1;
    }

    fn put(&mut self, cell: &Cell<'_>) {
        let c = &mut self.cols[self.next];
        self.next += 1;
        let present = |c: &mut Column, some: bool| {
            if c.spec.nullable {
                c.defs.push(i16::from(some));
            } else {
                assert!(some, "column {} is not nullable", c.spec.name);
            }
        };
        match (cell, &mut c.values) {
            (Cell::Str(v), Values::Str(_)) => {
                present(c, v.is_some());
                if let (Some(v), Values::Str(out)) = (v, &mut c.values) {
                    out.push(ByteArray::from(v.as_bytes().to_vec()));
                }
            }
            (Cell::I32(v), Values::I32(_)) if c.spec.kind == Kind::I32 => {
                present(c, v.is_some());
                if let (Some(v), Values::I32(out)) = (v, &mut c.values) {
                    out.push(*v);
                }
            }
            (Cell::I64(v), Values::I64(_)) => {
                present(c, v.is_some());
                if let (Some(v), Values::I64(out)) = (v, &mut c.values) {
                    out.push(*v);
                }
            }
            (Cell::ListI32(v), Values::I32(out)) if c.spec.kind == Kind::ListI32 => {
                // Three-level list, required group: def 0 = empty list, 1 = an element;
                // rep 0 starts a row's list, 1 continues it.
                if v.is_empty() {
                    c.defs.push(0);
                    c.reps.push(0);
                }
                for (n, x) in v.iter().enumerate() {
                    out.push(*x);
                    c.defs.push(1);
                    c.reps.push(i16::from(n > 0));
                }
            }
            _ => panic!("wrong cell type for column {}", c.spec.name),
        }
    }

    /// Writes the buffered rows as one row group and empties the buffers.
    pub fn write<W: std::io::Write + Send>(
        &mut self,
        rg: &mut SerializedRowGroupWriter<'_, W>,
    ) -> parquet::errors::Result<()> {
        for c in &mut self.cols {
            let mut w = rg.next_column()?.expect("the schema has this column");
            let defs = (c.spec.nullable || c.spec.kind == Kind::ListI32).then_some(&c.defs[..]);
            let reps = (c.spec.kind == Kind::ListI32).then_some(&c.reps[..]);
            match &mut c.values {
                Values::Str(v) => {
                    w.typed::<ByteArrayType>().write_batch(v, defs, reps)?;
                    v.clear();
                }
                Values::I32(v) => {
                    w.typed::<Int32Type>().write_batch(v, defs, reps)?;
                    v.clear();
                }
                Values::I64(v) => {
                    w.typed::<Int64Type>().write_batch(v, defs, reps)?;
                    v.clear();
                }
            }
            w.close()?;
            c.defs.clear();
            c.reps.clear();
        }
        self.rows = 0;
        Ok(())
    }
}
