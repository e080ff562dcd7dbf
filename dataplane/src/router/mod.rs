//! Routing of keys to clusters (prefix routes; only the catch-all route for now).
