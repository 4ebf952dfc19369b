//! A misbehaving network between the scope and a real `redis-server`: a TCP proxy that passes
//! requests and replies through whole (it parses RESP, so it knows which reply answers which
//! request) and does one fault, once, to the first request a rule matches.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does to the request a rule matches.
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    /// Sends these bytes (one reply, made up) to the client as soon as the request arrives,
    /// so that the client reads them first, and then the real reply: one reply too many.
    Extra(Vec<u8>),
    /// Sends the real reply one byte at a time, this long apart.
    Trickle(Duration),
    /// Lets the server run the request, throws its reply away and closes both connections.
    Cut,
    /// Sends these bytes instead of the real reply.
    Replace(Vec<u8>),
    /// Lets the server run the request and passes no reply back, then or ever after.
    Silence,
}

/// Which requests a rule applies to (the request is its arguments).
pub(crate) type Matcher = fn(&[Vec<u8>]) -> bool;

struct Rule {
    matches: Matcher,
    fault: Fault,
}

pub(crate) struct Proxy {
    pub(crate) port: u16,
    rules: Arc<Mutex<Vec<Rule>>>,
}

impl Proxy {
    /// A proxy on a free loopback port in front of the server on `upstream`.
    pub(crate) fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::default();
        let r = Arc::clone(&rules);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                pipe(client, server, Arc::clone(&r));
            }
        });
        Proxy { port, rules }
    }

    /// Does `fault` to the next request that `matches` (on any connection), once.
    pub(crate) fn once(&self, matches: Matcher, fault: Fault) {
        self.rules.lock().unwrap().push(Rule { matches, fault });
    }

    /// Whether every rule has been used.
    pub(crate) fn used(&self) -> bool {
        self.rules.lock().unwrap().is_empty()
    }

    pub(crate) fn url(&self, query: &str) -> String {
        format!("redis://127.0.0.1:{}/0?{query}", self.port)
    }
}

/// An acquire: the acquire script is the only one with six or more ARGV (notify prefix,
/// token, waiter, lease, registration, a mode per key).
pub(crate) fn is_acquire(req: &[Vec<u8>]) -> bool {
    script_argv(req).is_some_and(|n| n >= 6)
}

/// A leave or a release of one key: the scripts with four ARGV (the notify prefix, the waiter
/// or the token, the key's mode, and the request id).
pub(crate) fn is_leave_or_release(req: &[Vec<u8>]) -> bool {
    script_argv(req) == Some(4)
}

/// How many ARGV a script call (`EVALSHA`/`EVAL`) has.
fn script_argv(req: &[Vec<u8>]) -> Option<usize> {
    let name = req.first()?;
    if !name.eq_ignore_ascii_case(b"EVALSHA") && !name.eq_ignore_ascii_case(b"EVAL") {
        return None;
    }
    let keys: usize = std::str::from_utf8(req.get(2)?).ok()?.parse().ok()?;
    req.len().checked_sub(3 + keys)
}

/// One client connection: requests one way, replies the other, each reply matched to the
/// fault (if any) its request drew.
fn pipe(client: TcpStream, server: TcpStream, rules: Arc<Mutex<Vec<Rule>>>) {
    let pending: Arc<Mutex<VecDeque<Option<Fault>>>> = Arc::default();
    let to_client = Arc::new(Mutex::new(client.try_clone().unwrap()));
    let (client_r, server_w) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let (p, out) = (Arc::clone(&pending), Arc::clone(&to_client));
    std::thread::spawn(move || {
        let mut from = BufReader::new(client_r);
        let mut to = server_w;
        while let Ok((raw, args)) = read_request(&mut from) {
            let fault = {
                let mut rules = rules.lock().unwrap();
                let hit = rules.iter().position(|r| (r.matches)(&args));
                hit.map(|i| rules.remove(i).fault)
            };
            match fault {
                Some(Fault::Extra(bytes)) => {
                    let _ = out.lock().unwrap().write_all(&bytes);
                    p.lock().unwrap().push_back(None);
                }
                f => p.lock().unwrap().push_back(f),
            }
            if to.write_all(&raw).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    std::thread::spawn(move || {
        let mut from = BufReader::new(server.try_clone().unwrap());
        loop {
            let mut raw = Vec::new();
            if read_reply(&mut from, &mut raw).is_err() {
                break;
            }
            let fault = pending.lock().unwrap().pop_front().flatten();
            let mut to = to_client.lock().unwrap();
            let sent = match fault {
                None => to.write_all(&raw),
                Some(Fault::Replace(bytes)) => to.write_all(&bytes),
                Some(Fault::Trickle(gap)) => raw.iter().try_for_each(|b| {
                    to.write_all(&[*b])?;
                    to.flush()?;
                    std::thread::sleep(gap);
                    Ok(())
                }),
                Some(Fault::Cut) => {
                    let _ = to.shutdown(Shutdown::Both);
                    let _ = server.shutdown(Shutdown::Both);
                    return;
                }
                // Keeps both connections open, answering nothing.
                Some(Fault::Silence) => {
                    let _ = io::copy(&mut from, &mut io::sink());
                    return;
                }
                Some(Fault::Extra(_)) => unreachable!("sent when the request came"),
            };
            if sent.is_err() {
                break;
            }
        }
        let _ = to_client.lock().unwrap().shutdown(Shutdown::Write);
    });
}

fn line(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut l = Vec::new();
    r.read_until(b'\n', &mut l)?;
    if !l.ends_with(b"\r\n") {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(l)
}

fn number(l: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(&l[1..l.len() - 2])
        .ok()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| io::ErrorKind::InvalidData.into())
}

/// One request (an array of bulk strings): its bytes and its arguments.
fn read_request(r: &mut impl BufRead) -> io::Result<(Vec<u8>, Vec<Vec<u8>>)> {
    let head = line(r)?;
    if head[0] != b'*' {
        return Err(io::ErrorKind::InvalidData.into());
    }
    let mut raw = head.clone();
    let mut args = Vec::new();
    for _ in 0..number(&head)? {
        let len = line(r)?;
        raw.extend_from_slice(&len);
        let mut arg = vec![0; usize::try_from(number(&len)?).unwrap() + 2];
        r.read_exact(&mut arg)?;
        raw.extend_from_slice(&arg);
        arg.truncate(arg.len() - 2);
        args.push(arg);
    }
    Ok((raw, args))
}

/// One whole reply (RESP2, and RESP3's null), appended to `raw`.
fn read_reply(r: &mut impl BufRead, raw: &mut Vec<u8>) -> io::Result<()> {
    let head = line(r)?;
    raw.extend_from_slice(&head);
    match head[0] {
        b'+' | b'-' | b':' | b'_' => Ok(()),
        b'$' => match number(&head)? {
            -1 => Ok(()),
            n => {
                let mut body = vec![0; usize::try_from(n).unwrap() + 2];
                r.read_exact(&mut body)?;
                raw.extend_from_slice(&body);
                Ok(())
            }
        },
        b'*' => {
            for _ in 0..number(&head)?.max(0) {
                read_reply(r, raw)?;
            }
            Ok(())
        }
        _ => Err(io::ErrorKind::InvalidData.into()),
    }
}
