//! Sets the linker flags a Node-API addon needs (symbols resolved by the host process).

fn main() {
    napi_build::setup();
}
