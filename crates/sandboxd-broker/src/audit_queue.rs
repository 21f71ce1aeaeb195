//! Audit rows written after the answer: a call enqueues its row, stamped with the event's id
//! and time, and a writer task puts what has queued up into the store in one transaction.
//! Nothing is dropped: a full queue makes the caller write its own row (back-pressure), a
//! stopped writer leaves every later row to its caller, and [`AuditQueue::flush`] waits until
//! every row enqueued before it is in the store.

use std::sync::Mutex;

use sandboxd_store::{StampedAuditEntry, Store};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How many rows may wait for the writer. A burst of calls fills it in milliseconds only when
/// the store stalls; then callers write inline, which slows them rather than grow memory.
const QUEUE_ROWS: usize = 1024;

/// At most this many rows go into one transaction, so a long backlog is written in steps.
const BATCH_ROWS: usize = 256;

#[derive(Debug)]
enum Queued {
    Row(StampedAuditEntry),
    /// Answered once every row queued before it is written (or failed and logged).
    Flush(oneshot::Sender<()>),
}

#[derive(Debug)]
pub(crate) struct AuditQueue {
    store: Store,
    /// Bounded, so a stalled store turns into back-pressure instead of unbounded memory.
    rows: mpsc::Sender<Queued>,
    /// Cancelled to stop the writer: it closes the queue, writes what is in it, and ends.
    stop: CancellationToken,
    /// Cancelled when the writer has ended, panicked included: a flush that finds the queue
    /// closed waits on it for the rows the writer was still writing.
    drained: CancellationToken,
    /// The writer, joined once at stop. A std mutex: it is taken, never held across an await.
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl AuditQueue {
    /// Starts the writer on the current runtime.
    pub(crate) fn start(store: Store) -> Self {
        let (rows, queue) = mpsc::channel(QUEUE_ROWS);
        let stop = CancellationToken::new();
        let drained = CancellationToken::new();
        let writer = tokio::spawn(write_until_stopped(
            store.clone(),
            queue,
            stop.clone(),
            drained.clone(),
        ));
        Self {
            store,
            rows,
            stop,
            drained,
            writer: Mutex::new(Some(writer)),
        }
    }

    /// Queues `row` for the writer without waiting for it; when the queue is full or the
    /// writer stopped, writes it here and now instead.
    pub(crate) async fn push(&self, row: StampedAuditEntry) {
        if let Err(refused) = self.rows.try_send(Queued::Row(row))
            && let Queued::Row(row) = refused.into_inner()
        {
            write(&self.store, std::slice::from_ref(&row)).await;
        }
    }

    /// Writes `row` here and now, before the caller answers: for a row the daemon itself reads
    /// back to decide a later call, which a crash must not take away once the caller was
    /// answered.
    pub(crate) async fn write_now(&self, row: StampedAuditEntry) {
        write(&self.store, std::slice::from_ref(&row)).await;
    }

    /// Waits until every row queued before this call is written.
    pub(crate) async fn flush(&self) {
        let (done, written) = oneshot::channel();
        match self.rows.send(Queued::Flush(done)).await {
            Ok(()) => {
                let _ = written.await;
            }
            // Closed: the writer is writing what is left, or has.
            Err(_) => self.drained.cancelled().await,
        }
    }

    /// Stops the writer once everything queued is written; later rows are written by their
    /// callers. The daemon calls it after every task that audits has ended.
    pub(crate) async fn stop(&self) {
        self.stop.cancel();
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        match writer {
            Some(writer) => {
                if let Err(err) = writer.await {
                    tracing::error!(error = %err, "the audit writer failed");
                }
            }
            None => self.drained.cancelled().await,
        }
    }
}

async fn write_until_stopped(
    store: Store,
    mut queue: mpsc::Receiver<Queued>,
    stop: CancellationToken,
    drained: CancellationToken,
) {
    let _drained = drained.drop_guard();
    let mut batch = Vec::with_capacity(BATCH_ROWS);
    loop {
        let first = tokio::select! {
            biased;
            () = stop.cancelled(), if !queue.is_closed() => {
                // Nothing new gets in; what is queued is still received, then None.
                queue.close();
                continue;
            }
            first = queue.recv() => first,
        };
        let Some(first) = first else { break };
        batch.push(first);
        while batch.len() < BATCH_ROWS {
            match queue.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let mut rows = Vec::with_capacity(batch.len());
        let mut flushes = Vec::new();
        for queued in batch.drain(..) {
            match queued {
                Queued::Row(row) => rows.push(row),
                Queued::Flush(done) => flushes.push(done),
            }
        }
        write(&store, &rows).await;
        for done in flushes {
            let _ = done.send(());
        }
    }
}

/// Writes `rows` in one transaction; when that fails, each alone, so one bad row costs only
/// itself. A row that cannot be written is logged (its action, never its detail).
#[tracing::instrument(name = "audit_write", skip_all, fields(rows = rows.len()))]
async fn write(store: &Store, rows: &[StampedAuditEntry]) {
    if rows.is_empty() || store.append_audits(rows).await.is_ok() {
        return;
    }
    for row in rows {
        if let Err(err) = store.append_audits(std::slice::from_ref(row)).await {
            tracing::error!(action = row.action(), error = %err, "writing an audit row failed");
        }
    }
}
