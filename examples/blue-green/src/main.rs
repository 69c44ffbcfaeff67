//! The blue-green hook server: `blue-green-hook [--port 8080]`.

use metacontroller_hook::{serve, shutdown_signal};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let mut args = std::env::args().skip(1);
    let mut port = 8080u16;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => {
                port = args
                    .next()
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| std::io::Error::other("--port needs a number"))?
            }
            other => return Err(std::io::Error::other(format!("unknown argument {other}"))),
        }
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    serve(listener, blue_green_hook::hooks(), shutdown_signal()).await
}
