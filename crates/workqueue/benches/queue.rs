//! Queue throughput: adding, handing out and finishing 10k keys of two priorities.

use criterion::{criterion_group, criterion_main, Criterion};
use metacontroller_workqueue::{Priority, WorkQueue};

fn queue(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    c.bench_function("workqueue_10k_keys_add_get_done", |b| {
        b.iter(|| {
            rt.block_on(async {
                let q = WorkQueue::new("bench");
                for i in 0..10_000u32 {
                    q.add(
                        i,
                        if i % 10 == 0 {
                            Priority::Event
                        } else {
                            Priority::Bulk
                        },
                    );
                }
                for _ in 0..10_000u32 {
                    let k = q.get().await.unwrap();
                    q.done(&k);
                }
            })
        })
    });
}

criterion_group!(benches, queue);
criterion_main!(benches);
