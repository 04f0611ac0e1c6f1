//! heddle-runner
