//! Admin HTTP endpoint (`/stats`, `/stats/prometheus`) on its own thread, off the data path.
//!
//! CONTRACT (skeleton).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::stats::Store;

/// A running admin server; stops when dropped.
pub struct AdminServer {
    pub local_addr: SocketAddr,
}

/// Binds `addr` and serves admin requests on a background thread.
pub fn spawn(addr: SocketAddr, _stats: Arc<Store>) -> std::io::Result<AdminServer> {
    Ok(AdminServer { local_addr: addr })
}
