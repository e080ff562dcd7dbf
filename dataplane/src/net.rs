//! The thin layer over the io_uring runtime through which all sockets are made.
