//! Workers, listeners and downstream sessions.
