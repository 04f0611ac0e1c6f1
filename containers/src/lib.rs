//! heddle-containers
