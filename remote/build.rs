//! Generates the REAPI client (ContentAddressableStorage, ActionCache, ByteStream) from the
//! protos vendored under vendor/proto/ (see vendor/proto/README.md). protox parses them in Rust,
//! so building heddle needs no protoc; only clients are generated, and no comments (the
//! googleapis comments hold indented text that rustdoc would run as doctests).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "vendor/proto/build/bazel/remote/execution/v2/remote_execution.proto",
        "vendor/proto/google/bytestream/bytestream.proto",
    ];
    let fds = protox::compile(protos, ["vendor/proto"])?;
    let mut config = prost_build::Config::new();
    config.disable_comments(["."]);
    // `bytes` fields as `Bytes`: blob chunks pass from the socket to the hasher uncopied.
    config.bytes(["."]);
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .disable_comments(["."])
        .include_file("reapi_protos.rs")
        .compile_fds_with_config(fds, config)?;
    println!("cargo:rerun-if-changed=vendor/proto");
    Ok(())
}
