//! Links the addon as a Node-API module (napi-build).
fn main() {
    napi_build::setup();
}
