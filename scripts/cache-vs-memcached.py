#!/usr/bin/env python3
# Differential check, by hand: the cache engine (src/store/cache.cc) against a
# real memcached on a loopback port, command by command. Not part of `make
# test`; docs/cache-engine.md ("Differences from memcached") lists what it
# shows, and docs/results/cache-vs-memcached-2026-11-28.md holds a run.
#
#   scripts/cache-vs-memcached.py [--port 38117] [--memcached /usr/bin/memcached]
#
# It compiles a small driver (the engine behind a tab-separated script) with
# g++ into a temp dir, starts memcached -m 64 -I 1m (cas on) and runs each
# scenario against both: the same commands, memcached through its text
# protocol, the engine through its API. Then it finds the largest value
# memcached stores for several key lengths and -I/-C/flags settings, and
# compares with the engine's bound (key + value + 64 <= max_item_bytes).
# A value written @N is N bytes 'x'; %N is N '0's then '5'.
import argparse, json, os, socket, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DRIVER = r'''// Throwaway driver: the cache engine behind a tab-separated command script.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>
#include "ferry/common/clock.h"
#include "ferry/store/cache.h"
using namespace ferry;
using namespace ferry::store;
static std::string val(const std::string& v) {
  if (!v.empty() && v[0] == '@') return std::string(std::stoull(v.substr(1)), 'x');
  if (!v.empty() && v[0] == '%') return std::string(std::stoull(v.substr(1)), '0') + "5";
  return v;
}
int main(int argc, char** argv) {
  FakeClock clock{0};
  CacheOptions o;
  if (argc > 1) o.max_item_bytes = std::stoull(argv[1]);
  Cache c(clock, o);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> f;
    size_t start = 0;
    for (;;) {
      size_t t = line.find('\t', start);
      f.push_back(line.substr(start, t == std::string::npos ? std::string::npos : t - start));
      if (t == std::string::npos) break;
      start = t + 1;
    }
    if (f.empty()) continue;
    const std::string& op = f[0];
    std::string out;
    auto key = f.size() > 1 ? val(f[1]) : std::string();
    if (op == "set" || op == "add" || op == "replace") {
      std::string v = val(f[2]);
      CacheStatus s = op == "set" ? c.set(key, v, 0, 0) : op == "add" ? c.add(key, v, 0, 0) : c.replace(key, v, 0, 0);
      out = std::string(cache_status_name(s));
    } else if (op == "append" || op == "prepend") {
      std::string v = val(f[2]);
      out = std::string(cache_status_name(op == "append" ? c.append(key, v) : c.prepend(key, v)));
    } else if (op == "get") {
      auto r = c.get(key);
      out = std::string(cache_status_name(r.status));
      if (r.status == CacheStatus::kOk) {
        std::string v(r.value);
        out += " len=" + std::to_string(v.size()) + (v.size() <= 40 ? " '" + v + "'" : "");
      }
    } else if (op == "incr" || op == "decr") {
      uint64_t d = std::stoull(f[2]);  // the engine takes a uint64; delta syntax is the protocol's
      auto r = op == "incr" ? c.incr(key, d) : c.decr(key, d);
      out = std::string(cache_status_name(r.status));
      if (r.status == CacheStatus::kOk) out += " " + std::to_string(r.value);
    } else if (op == "gets") {
      auto r = c.gets(key);
      out = std::string(cache_status_name(r.status));
      if (r.status == CacheStatus::kOk) out += " cas=" + std::to_string(r.cas);
    } else if (op == "flush_all") {
      c.flush_all();
      out = "OK";
    } else if (op == "delete") {
      out = std::string(cache_status_name(c.remove(key)));
    } else {
      out = "?";
    }
    std::cout << out << "\n" << std::flush;
  }
}
'''

def set_incr_get(values, op='incr'):
    """set k to each value, incr (or decr) it by 1, read it back."""
    return [line for v in values for line in (['set', 'k', v], [op, 'k', '1'], ['get', 'k'])]


SCENARIOS = [
    ('incr shortens', set_incr_get(['007', '18446744073709551615']) + set_incr_get(['100'], 'decr') +
     set_incr_get(['99'])),
    ('number syntax', set_incr_get([' 5']) + set_incr_get(['  5'], 'decr') +
     set_incr_get(['+5', '-5', '-0', '5 abc', '5abc', '5 ', '', ' ', '18446744073709551616', '0x10',
                   '0' * 28 + '5', '+', '-', ' +5 x', '-18446744073709551615'])),
    ('append/prepend too large', [
        ['set', 'k', '@1048000'], ['append', 'k', '@600'], ['get', 'k'], ['prepend', 'k', '@600'], ['get', 'k'],
        ['append', 'k', '@1048576'], ['get', 'k'], ['prepend', 'k', '@1048576'], ['get', 'k'],
        ['append', 'nokey', '@1048576'], ['append', 'nokey', '@600'], ['prepend', 'nokey', '@1048576'],
        ['set', 'k', '@1048000'], ['append', 'k', '@514'], ['get', 'k'],
        ['set', 'k', '@1048000'], ['append', 'k', '@515'], ['get', 'k'],
        ['set', 'k', '@1048000'], ['append', 'k', '@510'], ['get', 'k']]),
    ('set too large', [
        ['set', 'k', 'v'], ['set', 'k', '@1048576'], ['get', 'k'], ['set', 'k', 'v'], ['set', 'k', '@1048514'],
        ['get', 'k'], ['add', 'j', '@1048576'], ['set', 'j', 'v'], ['replace', 'j', '@1048576'], ['get', 'j'],
        ['add', 'j', '@1048576'], ['get', 'j']]),
    ('incr on a chunked value', set_incr_get(['%600000', '%20'])),
    ('other white space', set_incr_get(['\v5', '5\vz', '5\fz'])),
    ('cas uniques: incr, decr, flush_all', [
        ['set', 'k', '99'], ['gets', 'k'], ['incr', 'k', '1'], ['gets', 'k'], ['decr', 'k', '1'], ['gets', 'k'],
        ['flush_all', ''], ['set', 'b', 'x'], ['gets', 'b'], ['flush_all', ''], ['flush_all', ''], ['set', 'c', 'x'],
        ['gets', 'c']]),
]


def value(x):
    if x.startswith('%'): return b'0' * int(x[1:]) + b'5'
    return b'x' * int(x[1:]) if x.startswith('@') else x.encode()


class Memcached:
    def __init__(self, port):
        self.s = socket.create_connection(('127.0.0.1', port))
        self.buf = b''

    def line(self):
        while b'\r\n' not in self.buf:
            self.buf += self.s.recv(1 << 20)
        l, self.buf = self.buf.split(b'\r\n', 1)
        return l

    def store(self, op, key, data, flags=0):
        self.s.sendall(b'%s %s %d 0 %d\r\n' % (op.encode(), key, flags, len(data)) + data + b'\r\n')
        return self.line().decode()

    def run(self, f):
        op, key = f[0], value(f[1])
        if op in ('set', 'add', 'replace', 'append', 'prepend'):
            return self.store(op, key, value(f[2]))
        if op == 'get':
            self.s.sendall(b'get ' + key + b'\r\n')
            l = self.line()
            if l == b'END': return 'NOT_FOUND'
            n = int(l.split()[3])
            while len(self.buf) < n + 2: self.buf += self.s.recv(1 << 20)
            d = self.buf[:n]
            self.buf = self.buf[n + 2:]
            assert self.line() == b'END'
            return 'OK len=%d' % n + (' ' + json.dumps(d.decode()) if n <= 40 else '')
        if op == 'gets':
            self.s.sendall(b'gets ' + key + b'\r\n')
            l = self.line()
            if l == b'END': return 'NOT_FOUND'
            n = int(l.split()[3])
            while len(self.buf) < n + 2: self.buf += self.s.recv(1 << 20)
            self.buf = self.buf[n + 2:]
            assert self.line() == b'END'
            return 'OK cas=%s' % l.split()[4].decode()
        if op in ('incr', 'decr'):
            self.s.sendall(b'%s %s %s\r\n' % (op.encode(), key, f[2].encode()))
            return self.line().decode()
        if op == 'delete':
            self.s.sendall(b'delete ' + key + b'\r\n')
            return self.line().decode()
        if op == 'flush_all':
            self.s.sendall(b'flush_all\r\n')
            return self.line().decode()


def shown(f):
    if f[0] in ('set', 'add', 'replace', 'append', 'prepend'):
        return ' '.join([f[0], f[1]] + [x if x[:1] and x[:1] in '@%' else json.dumps(x) for x in f[2:]])
    return ' '.join(f)


def engine_out(e):
    parts = e.split(' ', 2)
    return e if not e.startswith('OK len=') or len(parts) < 3 else parts[0] + ' ' + parts[1] + ' ' + json.dumps(parts[2][1:-1])


def start(args, extra):
    p = subprocess.Popen([args.memcached, '-l', '127.0.0.1', '-p', str(args.port), '-U', '0', '-m', '64'] + extra +
                         (['-u', 'root'] if os.geteuid() == 0 else []))
    for _ in range(50):
        try:
            return p, Memcached(args.port)
        except OSError:
            time.sleep(0.1)
    p.terminate()
    sys.exit('memcached did not start on port %d' % args.port)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--port', type=int, default=38117)
    ap.add_argument('--memcached', default='memcached')
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix='cache-vs-memcached.')
    drv = os.path.join(tmp, 'drv')
    with open(drv + '.cc', 'w') as f: f.write(DRIVER)
    subprocess.run(['g++', '-std=c++20', '-O1', '-I', ROOT + '/include', '-I', ROOT + '/src', drv + '.cc',
                    ROOT + '/src/store/cache.cc', ROOT + '/src/common/status.cc', '-o', drv], check=True)
    print(subprocess.run([args.memcached, '-V'], capture_output=True, text=True).stdout.strip())

    p, mc = start(args, ['-I', '1m'])
    try:
        for name, lines in SCENARIOS:
            print('##', name)
            mc.run(['flush_all', ''])
            eng = subprocess.run([drv], input='\n'.join('\t'.join(f) for f in lines) + '\n', capture_output=True,
                                 text=True).stdout.split('\n')
            for f, e in zip(lines, eng):
                print('%-34s | memcached: %-40s | engine: %s' % (shown(f), mc.run(f), engine_out(e)))
    finally:
        p.terminate(); p.wait()

    print('## the largest value stored, by key length (binary search on set)')
    for extra, flags, ibytes in ((['-I', '1m'], 0, 1 << 20), (['-I', '1m'], 7, 1 << 20), (['-I', '1m', '-C'], 0, 1 << 20),
                                 (['-I', '2m'], 0, 2 << 20)):
        p, mc = start(args, extra)
        try:
            for kl in (1, 2, 7, 8, 9, 100, 250):
                key = b'k' * kl
                lo, hi = 0, ibytes
                while lo + 1 < hi:
                    mid = (lo + hi) // 2
                    if mc.store('set', key, b'x' * mid, flags) == 'STORED': lo = mid
                    else: hi = mid
                e = subprocess.run([drv, str(ibytes)], input='set\t%s\t@%d\nset\t%s\t@%d\n' %
                                   (key.decode(), ibytes - 64 - kl, key.decode(), ibytes - 63 - kl),
                                   capture_output=True, text=True).stdout.split()
                print('memcached %-9s flags %d, key %3d B: largest key+value = I - %d; engine (max_item_bytes = I): '
                      'I - 64 (%s at I - 64, %s at I - 63): %d bytes lower' %
                      (' '.join(extra), flags, kl, ibytes - lo - kl, e[0], e[1], lo + kl - (ibytes - 64)))
        finally:
            p.terminate(); p.wait()


if __name__ == '__main__':
    main()
