//! The applier: resource cache, warming, snapshot building, validation and push.
