//! Concurrency: several threads creating, stat'ing, writing and removing files at once, in
//! their own directories and in one shared directory, then the checker.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Barrier;

const THREADS: usize = 4;
const FILES: usize = 2_000;

#[test]
fn four_threads_each_in_their_own_directory() {
    let mut fs = TestFs::new();
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (fs, barrier) = (&fs, &barrier);
            s.spawn(move || {
                let d = fs.join(format!("t{t}"));
                sys::mkdir(&d, 0o755).unwrap();
                barrier.wait();
                for i in 0..FILES {
                    let body = format!("thread {t} file {i}");
                    fs::write(d.join(format!("f{i}")), &body).unwrap();
                }
                for i in 0..FILES {
                    let m = lstat(d.join(format!("f{i}")));
                    assert_eq!(m.len(), format!("thread {t} file {i}").len() as u64);
                    assert!(m.is_file());
                }
                assert_eq!(names(&d).len(), FILES);
                for i in (0..FILES).step_by(7) {
                    assert_eq!(
                        fs::read_to_string(d.join(format!("f{i}"))).unwrap(),
                        format!("thread {t} file {i}")
                    );
                }
                for i in 0..FILES {
                    sys::unlink(d.join(format!("f{i}"))).unwrap();
                }
                assert!(names(&d).is_empty());
                for i in 0..FILES {
                    assert_errno!(fs::symlink_metadata(d.join(format!("f{i}"))), libc::ENOENT);
                }
            });
        }
    });
    for t in 0..THREADS {
        sys::rmdir(fs.join(format!("t{t}"))).unwrap();
    }
    let mut left = names(fs.path());
    left.retain(|n| n != b"lost+found");
    assert!(left.is_empty(), "left over: {left:?}");
    fs.unmount();
}

#[test]
fn four_threads_in_one_directory() {
    // Creates, renames and removals interleaved in one directory, plus lookups of the other
    // threads' names, then a check of exactly what must remain.
    let mut fs = TestFs::new();
    let d = fs.join("shared");
    sys::mkdir(&d, 0o755).unwrap();
    let barrier = Barrier::new(THREADS);
    const N: usize = 1_000;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (d, barrier) = (&d, &barrier);
            s.spawn(move || {
                barrier.wait();
                for i in 0..N {
                    fs::write(d.join(format!("{t}-{i}")), format!("{t}:{i}")).unwrap();
                    if i % 3 == 0 {
                        rename(d.join(format!("{t}-{i}")), d.join(format!("{t}-{i}-r"))).unwrap();
                    }
                    if i % 5 == 0 && i > 0 {
                        let victim = i - 1;
                        let name = if victim % 3 == 0 {
                            format!("{t}-{victim}-r")
                        } else {
                            format!("{t}-{victim}")
                        };
                        sys::unlink(d.join(name)).unwrap();
                    }
                    // Peek at another thread's progress; whatever is there must be whole.
                    let other = (t + 1) % THREADS;
                    if let Ok(b) = fs::read_to_string(d.join(format!("{other}-{i}"))) {
                        assert!(
                            b.is_empty() || b == format!("{other}:{i}"),
                            "torn content {b:?}"
                        );
                    }
                }
            });
        }
    });
    let mut expect = Vec::new();
    for t in 0..THREADS {
        for i in 0..N {
            let removed = (i + 1) % 5 == 0 && i + 1 < N;
            if !removed {
                expect.push(if i % 3 == 0 {
                    format!("{t}-{i}-r")
                } else {
                    format!("{t}-{i}")
                });
            }
        }
    }
    expect.sort();
    let got: Vec<String> = names(&d)
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect();
    let mut got_sorted = got.clone();
    got_sorted.sort();
    assert_eq!(got_sorted, expect);
    for n in &expect {
        let (t, i) = n.trim_end_matches("-r").split_once('-').unwrap();
        assert_eq!(fs::read_to_string(d.join(n)).unwrap(), format!("{t}:{i}"));
    }
    fs.remount();
    assert_eq!(names(&d).len(), expect.len());
}

#[test]
fn four_threads_writing_one_file() {
    // Disjoint 64 KiB stripes of one file written concurrently with pwrite; then every byte is
    // where its writer put it.
    let mut fs = TestFs::new();
    let f = fs.join("striped");
    let h = fs::File::create(&f).unwrap();
    const STRIPE: usize = 64 << 10;
    const ROUNDS: usize = 64;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let h = &h;
            s.spawn(move || {
                for r in 0..ROUNDS {
                    let k = r * THREADS + t;
                    h.write_all_at(&content(k as u64, STRIPE), (k * STRIPE) as u64)
                        .unwrap();
                }
            });
        }
    });
    drop(h);
    let check = |fs: &TestFs| {
        let data = fs::read(fs.join("striped")).unwrap();
        assert_eq!(data.len(), THREADS * ROUNDS * STRIPE);
        for k in 0..THREADS * ROUNDS {
            assert!(
                data[k * STRIPE..(k + 1) * STRIPE] == content(k as u64, STRIPE),
                "stripe {k}"
            );
        }
        assert!(lstat(fs.join("striped")).blocks() * 512 >= data.len() as u64);
    };
    check(&fs);
    fs.remount();
    check(&fs);
}
