//! [`JsonLines`]: audit records one per line, written off the request's task.
//!
//! The request's task only serializes the record and hands the line to a bounded queue; a
//! thread of the writer's own writes the lines (buffered, flushed whenever the queue runs
//! empty). When the queue is full (the disk is slower than the traffic) a record is dropped,
//! never waited for: the count is [`JsonLines::dropped`], and the first drop of every run of
//! them is logged at error on `mcp_gate::audit`. A failed write is logged the same way and
//! counted in [`JsonLines::failed`].

use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::{AuditRecord, AuditSink};

/// How many lines wait for the writer by default.
const DEFAULT_QUEUE: usize = 16_384;

/// What the queue carries to the writer's thread.
enum Message {
    /// One record's line, its line end included.
    Line(Vec<u8>),
    /// Write and flush everything before, then answer.
    Flush(SyncSender<io::Result<()>>),
}

/// Writes audit records as JSON lines to a file or any writer. Cheap to clone: clones share
/// one queue and one writer, so the application can keep one to [`flush`](Self::flush) and
/// give another to [`GateBuilder::audit`](crate::GateBuilder::audit).
///
/// ```no_run
/// use mcp_gate::audit::JsonLines;
///
/// let audit = JsonLines::append_to("/var/log/mcp-gate/audit.jsonl")?;
/// let gate = mcp_gate::Gate::builder()
///     .audit(audit.clone())
/// #   .resource("https://mcp.example.com/mcp").evaluate(mcp_gate::policy::allow_all())
///     // ...
///     ;
/// // ... and at shutdown, before the process exits:
/// audit.flush()?;
/// # Ok::<_, std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct JsonLines(Arc<Shared>);

struct Shared {
    sender: Mutex<Option<SyncSender<Message>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    dropped: AtomicU64,
    failed: AtomicU64,
    /// Whether the last record offered was dropped (a run of drops is logged once).
    dropping: AtomicBool,
}

impl std::fmt::Debug for JsonLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonLines")
            .field("dropped", &self.dropped())
            .field("failed", &self.failed())
            .finish_non_exhaustive()
    }
}

impl JsonLines {
    /// Lines written to `writer`, at most 16,384 waiting.
    pub fn new(writer: impl Write + Send + 'static) -> io::Result<Self> {
        Self::with_queue(writer, DEFAULT_QUEUE)
    }

    /// Lines appended to the file at `path`. A file made here is readable by its owner alone
    /// on Unix (mode `0600`: the records name who called what); an existing file keeps its
    /// mode.
    pub fn append_to(path: impl AsRef<Path>) -> io::Result<Self> {
        let mut options = OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        Self::new(options.open(path)?)
    }

    /// Lines written to `writer`, at most `queue` waiting (at least 1).
    pub fn with_queue(writer: impl Write + Send + 'static, queue: usize) -> io::Result<Self> {
        let (sender, receiver) = mpsc::sync_channel(queue.max(1));
        let counts = Arc::new(Counts::default());
        let worker = std::thread::Builder::new()
            .name("mcp-gate-audit".into())
            .spawn({
                let counts = counts.clone();
                move || write_lines(BufWriter::new(writer), &receiver, &counts)
            })?;
        Ok(Self(Arc::new(Shared {
            sender: Mutex::new(Some(sender)),
            worker: Mutex::new(Some(worker)),
            counts,
        })))
    }

    /// Waits until every record offered before is written and the writer flushed.
    pub fn flush(&self) -> io::Result<()> {
        let (answer, answered) = mpsc::sync_channel(1);
        let sender = self.sender().ok_or_else(closed)?;
        sender.send(Message::Flush(answer)).map_err(|_| closed())?;
        answered.recv().map_err(|_| closed())?
    }

    /// Flushes, stops the writer's thread and waits for it. Records offered afterwards are
    /// dropped (and counted).
    pub fn close(&self) -> io::Result<()> {
        let flushed = self.flush();
        drop(lock(&self.0.sender).take());
        if let Some(worker) = lock(&self.0.worker).take() {
            let _ = worker.join();
        }
        flushed
    }

    /// How many records were dropped because the queue was full or the writer closed.
    pub fn dropped(&self) -> u64 {
        self.0.counts.dropped.load(Ordering::Relaxed)
    }

    /// How many lines the writer failed to write.
    pub fn failed(&self) -> u64 {
        self.0.counts.failed.load(Ordering::Relaxed)
    }

    fn sender(&self) -> Option<SyncSender<Message>> {
        lock(&self.0.sender).clone()
    }
}

impl AuditSink for JsonLines {
    fn record(&self, record: &AuditRecord) {
        let mut line = record.to_json().into_bytes();
        line.push(b'\n');
        let counts = &self.0.counts;
        let sent = match self.sender() {
            Some(sender) => match sender.try_send(Message::Line(line)) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        };
        if sent {
            counts.dropping.store(false, Ordering::Relaxed);
            return;
        }
        counts.dropped.fetch_add(1, Ordering::Relaxed);
        if !counts.dropping.swap(true, Ordering::Relaxed) {
            tracing::error!(
                target: "mcp_gate::audit",
                dropped = counts.dropped.load(Ordering::Relaxed),
                "the audit writer is behind or closed: records are being dropped"
            );
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last clone: the queue closes, the thread writes what is left and ends.
        drop(lock(&self.sender).take());
        if let Some(worker) = lock(&self.worker).take() {
            let _ = worker.join();
        }
    }
}

/// The writer's thread: lines as they come, a flush whenever the queue runs empty.
fn write_lines(mut writer: impl Write, receiver: &Receiver<Message>, counts: &Counts) {
    let fail = |error: &io::Error| {
        counts.failed.fetch_add(1, Ordering::Relaxed);
        tracing::error!(target: "mcp_gate::audit", %error, "an audit record could not be written");
    };
    while let Ok(first) = receiver.recv() {
        let mut next = Some(first);
        // Everything already waiting is written before the one flush.
        while let Some(message) = next.take() {
            match message {
                Message::Line(line) => {
                    if let Err(error) = writer.write_all(&line) {
                        fail(&error);
                    }
                }
                Message::Flush(answer) => {
                    let _ = answer.send(writer.flush());
                }
            }
            next = receiver.try_recv().ok();
        }
        if let Err(error) = writer.flush() {
            fail(&error);
        }
    }
    let _ = writer.flush();
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the audit writer is closed")
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_new_file_is_its_owners_alone() {
        use std::os::unix::fs::PermissionsExt;

        let dir = std::env::temp_dir().join(format!("mcp-gate-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        let path = dir.join("audit.jsonl");
        let _ = std::fs::remove_file(&path);
        let audit = JsonLines::append_to(&path).expect("the file opens");
        audit.close().expect("closed");
        let mode = std::fs::metadata(&path).expect("made").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }
}
