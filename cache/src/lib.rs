//! heddle-cache
