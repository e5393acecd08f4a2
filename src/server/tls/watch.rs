//! The certificate, key and CA files watched for change, so a renewed certificate (certbot,
//! cert-manager, a configuration tool) is served without a signal.
//!
//! The files' metadata is polled rather than watched with inotify (the `notify` crate):
//! renewal tools replace files by rename or by swapping a symlink (Kubernetes secret
//! volumes swap a `..data` link), which inotify reports on the directory, not on the path
//! that was watched, and a watch on a replaced file silently goes dead. Reading the
//! metadata of three paths every few seconds follows every kind of replacement, needs no
//! dependency and costs nothing measurable; a certificate served a few seconds late does
//! no harm.

use super::TlsContext;
use std::path::Path;
use std::sync::Weak;
use std::time::{Duration, SystemTime};

/// How often the files' metadata is read.
pub const POLL: Duration = Duration::from_secs(2);

/// What the files looked like: a change in any of them means they were rewritten or
/// replaced. `None` for a file that cannot be read (then a reload reports why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stamp(Vec<Option<FileStamp>>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    /// Inode and change time: a file replaced by rename, or copied with its old
    /// modification time kept (`cp -p`), differs there.
    #[cfg(unix)]
    inode: (u64, u64, i64, i64),
}

impl Stamp {
    /// The metadata of `paths` now, following symlinks.
    pub(super) fn of<'a>(paths: impl Iterator<Item = &'a Path>) -> Stamp {
        Stamp(paths.map(file_stamp).collect())
    }
}

fn file_stamp(path: &Path) -> Option<FileStamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        #[cfg(unix)]
        inode: {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
        },
    })
}

/// Until the context is dropped: reloads it once its files changed and then looked the
/// same for one poll, so a file still being written, or a certificate written before its
/// key, is not taken half-done. A reload that fails logs one error and keeps the old
/// identity; the same files are not tried again until they change again.
pub async fn watch(context: Weak<TlsContext>) {
    let mut ticks = tokio::time::interval(POLL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous: Option<Stamp> = None;
    loop {
        ticks.tick().await;
        let Some(context) = context.upgrade() else {
            return;
        };
        let now = context.stamp();
        if previous.as_ref() == Some(&now) && !context.attempted(&now) {
            context.reload_logged("the certificate files changed");
        }
        previous = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_or_a_replacement_changes_the_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cert.pem");
        std::fs::write(&path, "one").unwrap();
        let stamp = || Stamp::of(std::iter::once(path.as_path()));
        let first = stamp();
        assert_eq!(first, stamp());
        std::fs::write(&path, "one, longer").unwrap();
        let rewritten = stamp();
        assert_ne!(first, rewritten);
        let other = dir.path().join("new.pem");
        std::fs::write(&other, "one, longer").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_ne!(rewritten, stamp(), "replaced by rename");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(stamp(), Stamp(vec![None]));
    }
}
