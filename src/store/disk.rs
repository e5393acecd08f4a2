//! Disk limits: how full the data dir's filesystem may get before durable
//! writes are refused, and the state that tells producers so. Free space is
//! read on a timer, not per message: a producer pays one atomic load.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the data dir's filesystem is looked at.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Below this much free space a store that failed a write does not try to
/// reopen for writing yet (each attempt writes a few small files).
const RECOVERY_FLOOR: u64 = 1 << 20;

const OVER_LIMIT: u8 = 1;
const WRITE_FAILED: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLimits {
    /// Percent of the filesystem in use beyond which durable writes are refused.
    pub max_usage_percent: u8,
    /// Free bytes below which durable writes are refused.
    pub min_free: u64,
}

impl Default for DiskLimits {
    fn default() -> Self {
        Self {
            max_usage_percent: 90,
            min_free: 64 << 20,
        }
    }
}

/// Why a durable write is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiskRefusal {
    #[error("disk limit reached: max_disk_usage is {limit}%, the data dir's filesystem is {used}% used; durable messages are refused until space returns")]
    MaxDiskUsage { limit: u8, used: u8 },
    #[error("disk limit reached: min_free_disk is {limit} bytes, {free} bytes are free; durable messages are refused until space returns")]
    MinFreeDisk { limit: u64, free: u64 },
    #[error(
        "disk full: a write to the store failed; durable messages are refused until space returns"
    )]
    WriteFailed,
}

/// One look at the filesystem.
#[derive(Debug, Clone, Copy, Default)]
struct Reading {
    free: u64,
    used_percent: u8,
}

/// Shared by the store handles, the writer and the monitor thread.
#[derive(Debug)]
pub(super) struct DiskState {
    limits: DiskLimits,
    flags: AtomicU8,
    reading: parking_lot::Mutex<Reading>,
}

impl DiskState {
    /// Starts watching `dir`'s filesystem; the watcher ends with the last handle.
    pub fn watch(dir: &Path, limits: DiskLimits) -> Arc<Self> {
        let state = Arc::new(Self {
            limits,
            flags: AtomicU8::new(0),
            reading: parking_lot::Mutex::new(Reading {
                free: u64::MAX,
                used_percent: 0,
            }),
        });
        state.check(dir);
        let weak = Arc::downgrade(&state);
        let dir = dir.to_path_buf();
        let spawned = std::thread::Builder::new()
            .name("weir-store-disk".into())
            .spawn(move || monitor(weak, dir));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the disk monitor: disk limits are not checked");
        }
        state
    }

    /// True when durable writes are refused (the hot-path check).
    #[inline]
    pub fn refusing(&self) -> bool {
        self.flags.load(Ordering::Relaxed) != 0
    }

    /// Why writes are refused, if they are.
    pub fn refusal(&self) -> Option<DiskRefusal> {
        let flags = self.flags.load(Ordering::Relaxed);
        if flags & WRITE_FAILED != 0 {
            return Some(DiskRefusal::WriteFailed);
        }
        if flags & OVER_LIMIT == 0 {
            return None;
        }
        let reading = *self.reading.lock();
        Some(self.over_limit(reading).unwrap_or(DiskRefusal::WriteFailed))
    }

    pub fn set_write_failed(&self, failed: bool) {
        if failed {
            self.flags.fetch_or(WRITE_FAILED, Ordering::Relaxed);
        } else {
            self.flags.fetch_and(!WRITE_FAILED, Ordering::Relaxed);
        }
    }

    /// Whether there is room again to try writing after a failed write.
    pub fn space_returned(&self) -> bool {
        let reading = *self.reading.lock();
        self.over_limit(reading).is_none() && reading.free >= RECOVERY_FLOOR
    }

    fn over_limit(&self, reading: Reading) -> Option<DiskRefusal> {
        if reading.used_percent > self.limits.max_usage_percent {
            return Some(DiskRefusal::MaxDiskUsage {
                limit: self.limits.max_usage_percent,
                used: reading.used_percent,
            });
        }
        if reading.free < self.limits.min_free {
            return Some(DiskRefusal::MinFreeDisk {
                limit: self.limits.min_free,
                free: reading.free,
            });
        }
        None
    }

    fn check(&self, dir: &Path) {
        let Some(reading) = read_filesystem(dir) else {
            return;
        };
        *self.reading.lock() = reading;
        let over = self.over_limit(reading);
        let was = self.flags.load(Ordering::Relaxed) & OVER_LIMIT != 0;
        match over {
            Some(refusal) if !was => {
                tracing::warn!(%refusal, "disk limit reached");
                self.flags.fetch_or(OVER_LIMIT, Ordering::Relaxed);
            }
            None if was => {
                tracing::info!("disk back under its limits: durable messages accepted again");
                self.flags.fetch_and(!OVER_LIMIT, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

fn monitor(state: Weak<DiskState>, dir: PathBuf) {
    loop {
        std::thread::sleep(CHECK_EVERY);
        let Some(state) = state.upgrade() else {
            return;
        };
        state.check(&dir);
    }
}

/// Free bytes (for an unprivileged process, as RocksDB would see them) and
/// percent used, as `df` counts them.
fn read_filesystem(dir: &Path) -> Option<Reading> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes only into the struct we pass; the path is NUL-terminated.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    let block = stat.f_frsize as u64;
    let total = stat.f_blocks as u64 * block;
    let free = stat.f_bavail as u64 * block;
    let used = total.saturating_sub(stat.f_bfree as u64 * block);
    // df's rule: used / (used + available), rounded up.
    let usable = used + free;
    let used_percent = if usable == 0 {
        100
    } else {
        (used * 100).div_ceil(usable).min(100) as u8
    };
    Some(Reading { free, used_percent })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_filesystem_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let reading = read_filesystem(dir.path()).unwrap();
        assert!(reading.used_percent <= 100);
        assert!(reading.free > 0);
    }

    #[test]
    fn limits_name_themselves() {
        let state = DiskState {
            limits: DiskLimits {
                max_usage_percent: 90,
                min_free: 1000,
            },
            flags: AtomicU8::new(0),
            reading: parking_lot::Mutex::new(Reading::default()),
        };
        let full = state.over_limit(Reading {
            free: 5000,
            used_percent: 95,
        });
        assert!(full.unwrap().to_string().contains("max_disk_usage"));
        let low = state.over_limit(Reading {
            free: 10,
            used_percent: 50,
        });
        assert!(low.unwrap().to_string().contains("min_free_disk"));
        assert!(state
            .over_limit(Reading {
                free: 5000,
                used_percent: 90
            })
            .is_none());
    }
}
