#![cfg(feature = "postgres")]
use keylock_core::*;
use std::time::Duration;
const URL: &str = "postgres://keylock:secretpw@127.0.0.1:55432/keylock?prefix=scratch&lease=3s";
#[test]
fn scratch() {
    let a = open(URL).unwrap();
    let b = open(URL).unwrap();
    println!("{a:?}");
    let k = LockKey::new(b"k1");
    let x = a.acquire(k, &LockOptions::new()).unwrap();
    println!("fence {}", x.fence());
    assert!(matches!(
        b.acquire(k, &LockOptions::new().wait(Wait::No)),
        Err(Error::WouldBlock)
    ));
    println!("info {:?}", b.info(k).unwrap());
    let t = std::time::Instant::now();
    let r = b.acquire(
        k,
        &LockOptions::new().wait(Wait::For(Duration::from_millis(300))),
    );
    println!("timed {:?} after {:?}", r.err(), t.elapsed());
    let b2 = b.clone();
    let h = std::thread::spawn(move || {
        b2.acquire(LockKey::new(b"k1"), &LockOptions::new())
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    println!("info waiting {:?}", a.info(k).unwrap());
    a.release(x).unwrap();
    let y = h.join().unwrap();
    println!("b fence {}", y.fence());
    assert!(a.force_unlock(k).unwrap());
    let z = a.acquire(k, &LockOptions::new()).unwrap();
    println!("after force fence {} died {}", z.fence(), z.owner_died());
    println!("b release after force: {:?}", b.release(y));
    a.release(z).unwrap();
    let s1 = a
        .acquire(k, &LockOptions::new().mode(Mode::Shared))
        .unwrap();
    let s2 = b
        .acquire(k, &LockOptions::new().mode(Mode::Shared))
        .unwrap();
    println!(
        "shared fences {} {} info {:?}",
        s1.fence(),
        s2.fence(),
        a.info(k).unwrap()
    );
    a.release(s1).unwrap();
    b.release(s2).unwrap();
    let many = a
        .acquire_many(
            &[
                (LockKey::new(b"m1"), Mode::Exclusive),
                (LockKey::new(b"m2"), Mode::Shared),
            ],
            &LockOptions::new(),
        )
        .unwrap();
    println!(
        "many {:?}",
        many.iter().map(|a| a.fence()).collect::<Vec<_>>()
    );
    for m in many {
        a.release(m).unwrap();
    }
    let bad = open("postgres://keylock:wrong@127.0.0.1:55432/keylock");
    println!("bad pw: {:?}", bad.err());
    let sem = open_with(URL, &OpenOptions::new().permits(3));
    println!("sem: {:?}", sem.err());
}
