//! `quiesce`: the reference daemon (`quiesce agent -dev`) and its Nomad-style CLI.

fn main() {
    std::process::exit(quiesce::main(std::env::args().collect()));
}
