//! The `tandem` binary: `tandem crds` prints the CustomResourceDefinitions.
fn main() {
    for crd in tandem::api::crds::all() {
        match tandem::api::crds::to_yaml(&crd) {
            Ok(yaml) => print!("{yaml}---\n"),
            Err(e) => eprintln!("tandem: {e}"),
        }
    }
}
