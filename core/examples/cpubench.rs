use keylock_core::*;
use std::hint::black_box;
#[repr(C)]
struct Ts {
    s: i64,
    ns: i64,
}
unsafe extern "C" {
    fn clock_gettime(c: i32, t: *mut Ts) -> i32;
}
fn cpu() -> f64 {
    let mut t = Ts { s: 0, ns: 0 };
    unsafe { clock_gettime(3, &mut t) };
    t.s as f64 * 1e9 + t.ns as f64
}
fn time(name: &str, mut f: impl FnMut()) -> f64 {
    let n = 2_000_000;
    for _ in 0..n / 4 {
        f();
    }
    let mut v: Vec<f64> = (0..9)
        .map(|_| {
            let t = cpu();
            for _ in 0..n {
                f();
            }
            (cpu() - t) / n as f64
        })
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{name:36} median {:6.2} ns  (min {:6.2} max {:6.2})",
        v[4], v[0], v[8]
    );
    v[4]
}
fn ready<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(o) => o,
        _ => panic!(),
    }
}
fn main() {
    let m = parking_lot::Mutex::new(());
    let floor = time("parking_lot", || drop(black_box(&m).lock()));
    let s = StripedLock::new(1024).unwrap();
    let mut k = 0u64;
    let st = time("striped u64", || {
        k = (k + 1) & 1023;
        drop(s.lock(&black_box(k)))
    });
    let sa = time("striped u64 async", || {
        k = (k + 1) & 1023;
        drop(ready(s.lock_async(&black_box(k))))
    });
    let p: KeyPool<u64> = KeyPool::new();
    let pt = time("pool u64", || {
        k = (k + 1) & 1023;
        drop(p.lock(&black_box(k)))
    });
    time("pool u64 shared", || {
        k = (k + 1) & 1023;
        drop(p.lock_shared(&black_box(k)))
    });
    time("pool u64 async", || {
        k = (k + 1) & 1023;
        drop(ready(p.lock_async(&black_box(k))))
    });
    let keys: Vec<String> = (0..1024).map(|i| format!("user:{i:010}_")).collect();
    let mut i = 0usize;
    let ss = time("striped str16", || {
        i = (i + 1) & 1023;
        drop(s.lock(black_box(keys[i].as_str())))
    });
    let ps: KeyPool<String> = KeyPool::new();
    let pss = time("pool str16", || {
        i = (i + 1) & 1023;
        drop(ps.lock(black_box(keys[i].as_str())))
    });
    let naive: parking_lot::Mutex<
        std::collections::HashMap<u64, std::sync::Arc<parking_lot::Mutex<()>>>,
    > = Default::default();
    let nt = time("naive u64", || {
        k = (k + 1) & 1023;
        let mm = {
            let mut g = naive.lock();
            std::sync::Arc::clone(g.entry(black_box(k)).or_default())
        };
        drop(mm.lock());
    });
    println!(
        "striped/floor {:.2}  pool/striped u64 {:.2}  str16 {:.2}  pool/naive {:.2}  striped async/sync {:.2}",
        st / floor,
        pt / st,
        pss / ss,
        pt / nt,
        sa / st
    );
}
