//! stub
use clap::Args;
#[derive(Args, Debug)]
pub struct CompareArgs {}
pub fn main(_a: CompareArgs) -> std::process::ExitCode { std::process::ExitCode::SUCCESS }
