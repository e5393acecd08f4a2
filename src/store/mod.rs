//! RocksDB persistence.
