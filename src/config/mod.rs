//! TOML configuration, read once at start. (placeholder: the config helper replaces this)
