//! A statement with bound parameters on the agent's held connection (`run_experiment`'s
//! `sql(query, params)`). The extended protocol carries each value in its own Bind field, as
//! text the server's input function reads for the type it inferred: a value is never spliced
//! into the statement. Rows come back in the binary format; each value is shown in the
//! server's own text form, as the simple protocol shows it: read here for the types whose text
//! is their bytes or an integer, asked of the server (`SELECT $1::text`) for any other.

use std::collections::HashMap;
use std::error::Error;

use bytes::BytesMut;
use futures::StreamExt;
use tokio_postgres::Statement;
use tokio_postgres::types::{Format, FromSql, IsNull, Kind, ToSql, Type, to_sql_checked};

use super::agent::{AgentConnection, StatementError};
use crate::wire::query::{Collector, Cut, Param, QueryAnswer, QueryLimits};

/// A param as the server's input function reads it.
#[derive(Debug)]
struct AsText<'a>(&'a Param);

impl ToSql for AsText<'_> {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self.0.as_text() {
            None => Ok(IsNull::Yes),
            Some(text) => {
                out.extend_from_slice(text.as_bytes());
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    fn encode_format(&self, _: &Type) -> Format {
        Format::Text
    }

    to_sql_checked!();
}

/// A value's bytes in the binary format, as they came (and as they go back to be shown).
#[derive(Debug)]
struct Binary(Vec<u8>);

impl<'a> FromSql<'a> for Binary {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        Ok(Binary(raw.to_vec()))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

impl ToSql for Binary {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// The server's text form of a value whose binary form says it plainly; None for the rest.
fn plain_text(ty: &Type, raw: &[u8]) -> Option<String> {
    let utf8 = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).ok();
    if *ty == Type::BOOL {
        Some(if *raw.first()? != 0 { "t" } else { "f" }.to_owned())
    } else if *ty == Type::INT2 {
        Some(i16::from_be_bytes(raw.try_into().ok()?).to_string())
    } else if *ty == Type::INT4 {
        Some(i32::from_be_bytes(raw.try_into().ok()?).to_string())
    } else if *ty == Type::INT8 {
        Some(i64::from_be_bytes(raw.try_into().ok()?).to_string())
    } else if *ty == Type::OID {
        Some(u32::from_be_bytes(raw.try_into().ok()?).to_string())
    } else if [
        Type::TEXT,
        Type::VARCHAR,
        Type::BPCHAR,
        Type::NAME,
        Type::UNKNOWN,
        Type::JSON,
    ]
    .contains(ty)
        || matches!(ty.kind(), Kind::Enum(_))
    {
        utf8(raw)
    } else if *ty == Type::JSONB {
        // Version 1 of the format, then the text.
        match raw.split_first() {
            Some((1, text)) => utf8(text),
            _ => None,
        }
    } else if *ty == Type::BYTEA {
        Some(format!("\\x{}", hex::encode(raw)))
    } else {
        None
    }
}

impl AgentConnection {
    /// One statement with `params` bound to its placeholders, its rows as text under `limits`
    /// (its `timeout` is the connection's). A statement that returns no rows answers the rows
    /// it wrote.
    pub async fn run_bound(
        &self,
        statement: &str,
        params: &[Param],
        limits: QueryLimits,
    ) -> Result<QueryAnswer, StatementError> {
        self.cap.limit_messages(limits.wire_max());
        let mut collector = Collector::new(limits);
        match self.collect_bound(statement, params, &mut collector).await {
            Err(_) if self.cap.tripped() => collector.cut(Cut::MaxBytes),
            outcome => outcome?,
        }
        Ok(collector.answer)
    }

    async fn collect_bound(
        &self,
        statement: &str,
        params: &[Param],
        collector: &mut Collector,
    ) -> Result<(), StatementError> {
        // Parse refuses several statements in one string, as for a statement without params.
        let prepared = self.client.prepare(statement).await?;
        let wanted = prepared.params().len();
        if wanted != params.len() {
            return Err(StatementError::Refused(format!(
                "the statement has {wanted} placeholder(s) ($1, $2, …) and {} param(s) were \
                 given",
                params.len()
            )));
        }
        let bound = params.iter().map(AsText);
        if prepared.columns().is_empty() {
            let written = self.client.execute_raw(&prepared, bound).await?;
            collector.complete(written);
            return Ok(());
        }
        collector.describe(
            prepared
                .columns()
                .iter()
                .map(|c| c.name().to_owned())
                .collect(),
        );
        let (rows, cut) = self.rows_of(&prepared, bound, collector.limits()).await?;
        let mut shown_by_server: HashMap<u32, Statement> = HashMap::new();
        for row in rows {
            let mut values = Vec::with_capacity(row.len());
            for (value, column) in row.into_iter().zip(prepared.columns()) {
                values.push(match value {
                    None => serde_json::Value::Null,
                    Some(Binary(raw)) => match plain_text(column.type_(), &raw) {
                        Some(text) => text.into(),
                        None => self
                            .shown_by_server(column, &Binary(raw), &mut shown_by_server)
                            .await?
                            .into(),
                    },
                });
            }
            if !collector.push(values) {
                return Ok(());
            }
        }
        if let Some(cut) = cut {
            collector.cut(cut);
        }
        Ok(())
    }

    /// The rows of the bound statement, read whole before any is shown (the connection serves
    /// one request at a time): at most one past `max_rows`, and values of at most about
    /// `max_bytes` in all; the limit that stopped the reading, if one did.
    async fn rows_of<'a>(
        &self,
        prepared: &Statement,
        bound: impl ExactSizeIterator<Item = AsText<'a>>,
        limits: QueryLimits,
    ) -> Result<(Vec<Vec<Option<Binary>>>, Option<Cut>), StatementError> {
        let stream = self.client.query_raw(prepared, bound).await?;
        futures::pin_mut!(stream);
        let mut rows = Vec::new();
        let mut bytes = 0usize;
        while let Some(row) = stream.next().await {
            let row = row?;
            let mut values = Vec::with_capacity(row.len());
            for i in 0..row.len() {
                let value: Option<Binary> = row
                    .try_get(i)
                    .map_err(|e| StatementError::Refused(e.to_string()))?;
                bytes += value.as_ref().map_or(0, |v| v.0.len());
                values.push(value);
            }
            rows.push(values);
            // One row past the limit: the collector cuts there and says so.
            if rows.len() > limits.max_rows {
                return Ok((rows, None));
            }
            if bytes > limits.max_bytes {
                return Ok((rows, Some(Cut::MaxBytes)));
            }
        }
        Ok((rows, None))
    }

    /// A value the server shows as text (`SELECT $1::text`, the value sent back in its binary
    /// form as its own type), one prepared statement per type.
    async fn shown_by_server(
        &self,
        column: &tokio_postgres::Column,
        value: &Binary,
        statements: &mut HashMap<u32, Statement>,
    ) -> Result<String, StatementError> {
        let ty = column.type_();
        let unshowable = |err: tokio_postgres::Error| {
            StatementError::Refused(format!(
                "column {} ({}) cannot be shown as text here: {}; cast it to text in the \
                 statement (e.g. {}::text)",
                column.name(),
                ty.name(),
                StatementError::from(err),
                column.name()
            ))
        };
        let statement = match statements.get(&ty.oid()) {
            Some(statement) => statement.clone(),
            None => {
                let statement = self
                    .client
                    .prepare_typed("SELECT $1::text", std::slice::from_ref(ty))
                    .await
                    .map_err(unshowable)?;
                statements.insert(ty.oid(), statement.clone());
                statement
            }
        };
        let row = self
            .client
            .query_one(&statement, &[value])
            .await
            .map_err(unshowable)?;
        row.try_get::<_, String>(0)
            .map_err(|e| StatementError::Refused(e.to_string()))
    }
}
