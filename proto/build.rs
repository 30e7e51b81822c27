//! Compiles proto/sdm.proto with protox (pure Rust, no `protoc` binary) and prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/sdm.proto");
    let fds = protox::compile(["sdm.proto"], ["proto"])?;
    prost_build::Config::new().bytes(["."]).compile_fds(fds)?;
    Ok(())
}
