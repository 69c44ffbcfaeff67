//! Runs the embedded API server until Ctrl-C and writes a kubeconfig.
//! `cargo run -p embedded-apiserver --example serve -- /tmp/kubeconfig [port]`

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "kubeconfig".into());
    let port = args.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let server = embedded_apiserver::ApiServer::start(embedded_apiserver::Config {
        port,
        ..Default::default()
    })
    .await?;
    server.write_kubeconfig(&path)?;
    println!("serving at {} (kubeconfig: {path})", server.url());
    tokio::signal::ctrl_c().await?;
    server.shutdown().await;
    Ok(())
}
