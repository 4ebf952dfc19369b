// The keylock bank, in C++17 with std::thread and the RAII header keylock.hpp.
//
// W workers move random amounts between A accounts. A transfer locks the two account keys
// together with lock_many (first with a keylock::KeyPool, then again with a
// keylock::StripedLock) while holding the keylock::RwLock for reading; an auditor thread takes
// the RwLock for writing, sums every balance and checks that the total never changed.
//
// The accounts live in a store that fences its writes (as `UPDATE accounts SET balance = $b,
// fence = $f WHERE id = $id AND fence < $f` would): each write carries the fence of the
// writer's acquisition of that account, and the store refuses one that is not newer than the
// last it applied. After each phase a stale writer takes account 0 with a 50 ms lease and
// stalls past it; the next holder takes over and writes; the stale write is refused, and the
// stale guard's unlock() throws KEYLOCK_LEASE_EXPIRED.
//
// Prints transfers per second for each per-key primitive, the audits passed, the stale
// writers stopped, and the final total against the initial one; exits non-zero on any mismatch
// or error.
//
// Usage: bank_cpp [workers] [accounts] [milliseconds per primitive]

#include <keylock.hpp>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

// One account in the store: its balance and the fence of the last write applied to it.
struct Account {
    std::int64_t balance;
    std::uint64_t fence;
};

struct Bank {
    explicit Bank(int accounts) : store(static_cast<std::size_t>(accounts), Account{1000, 0}) {
        for (int i = 0; i < accounts; i++) keys.push_back("account:" + std::to_string(i));
        initial_total = total();
    }

    // Plain integers: the locks alone keep them consistent.
    std::vector<Account> store;
    std::vector<std::string> keys;
    std::int64_t initial_total = 0;
    keylock::RwLock rw;
    std::atomic<bool> stop{false};
    std::atomic<int> errors{0};
    long audits_passed = 0;
    long audits_failed = 0;
    std::atomic<long> refused_writes{0};  // by the store in transfers: must stay 0
    long stale_writers_stopped = 0;

    // The store's one rule: a write must carry a fence newer than the last one applied.
    static bool accepts(const Account &a, std::uint64_t fence) { return fence > a.fence; }

    std::int64_t total() const {
        std::int64_t sum = 0;
        for (const auto &a : store) sum += a.balance;
        return sum;
    }

    // An audit that cannot get the write lock within 5 s throws rather than hang (a reader that
    // never left would otherwise stop the demo forever).
    void audit() {
        auto w = rw.try_write_for(std::chrono::seconds(5));
        if (!w) throw keylock::error(KEYLOCK_TIMEOUT);
        std::int64_t sum = total();
        if (sum == initial_total) {
            audits_passed++;
        } else {
            audits_failed++;
            std::fprintf(stderr, "bank: audit found total %" PRId64 ", expected %" PRId64 "\n", sum, initial_total);
        }
    }
};

// A holder that stalls past its lease and then writes: the store's fence stops it.
template <class KeyedLock>
void stale_writer(Bank &bank, KeyedLock &keyed) {
    using namespace std::chrono_literals;
    auto mine = keyed.lock(bank.keys[0], keylock::options().lease(50ms));
    std::thread next_holder([&] {  // takes over once the lease ends, and writes
        auto next = keyed.try_lock_for(bank.keys[0], 5s);
        if (!next) {
            std::fprintf(stderr, "bank: the next holder did not get account 0 in time\n");
            bank.errors++;
        } else if (Bank::accepts(bank.store[0], next->fence())) {
            bank.store[0].fence = next->fence();
        }
    });
    next_holder.join();  // the stall
    if (Bank::accepts(bank.store[0], mine.fence())) {
        std::fprintf(stderr, "bank: the store accepted a write from a holder whose lease had ended\n");
        bank.errors++;
        return;
    }
    try {
        mine.unlock();
        std::fprintf(stderr, "bank: a stale release succeeded\n");
        bank.errors++;
    } catch (const keylock::error &e) {
        if (e.code() == KEYLOCK_LEASE_EXPIRED) bank.stale_writers_stopped++;
        else throw;
    }
}

// Runs the workers and the auditor for `duration` with one per-key primitive; returns
// transfers per second.
template <class KeyedLock>
double run_phase(Bank &bank, KeyedLock &keyed, int workers, std::chrono::milliseconds duration) {
    bank.stop = false;
    for (auto &a : bank.store) a.fence = 0;  // a new lock object: a new series of fences
    std::vector<long> transfers(static_cast<std::size_t>(workers), 0);
    std::vector<std::thread> threads;
    auto start = clock_type::now();
    for (int t = 0; t < workers; t++) {
        threads.emplace_back([&, t] {
            try {
                std::mt19937_64 rng(0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(t + 1));
                std::uniform_int_distribution<std::size_t> pick(0, bank.store.size() - 1);
                std::uniform_int_distribution<std::int64_t> amount_of(1, 100);
                long done = 0;
                while (!bank.stop.load(std::memory_order_relaxed)) {
                    std::size_t from = pick(rng), to = pick(rng);
                    if (from == to) continue;
                    std::int64_t amount = amount_of(rng);
                    auto reading = bank.rw.read();
                    auto both = keyed.lock_many({bank.keys[from], bank.keys[to]});
                    // one record per distinct lock, in key order (two accounts of one stripe
                    // share the first one's): each account's fence
                    const auto fences = both.fences();
                    std::uint64_t f_from = fences.front(), f_to = fences.back();
                    Account &src = bank.store[from], &dst = bank.store[to];
                    if (!Bank::accepts(src, f_from) || !Bank::accepts(dst, f_to)) {
                        bank.refused_writes++;  // cannot happen while the locks exclude
                    } else if (src.balance >= amount) {
                        src = Account{src.balance - amount, f_from};
                        dst = Account{dst.balance + amount, f_to};
                    }
                    done++;
                }
                transfers[static_cast<std::size_t>(t)] = done;
            } catch (const keylock::error &e) {
                std::fprintf(stderr, "bank: worker failed: %s\n", e.what());
                bank.errors++;
                bank.stop = true;
            }
        });
    }
    std::thread auditor([&] {
        try {
            while (!bank.stop) {
                bank.audit();
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
            }
        } catch (const keylock::error &e) {
            std::fprintf(stderr, "bank: auditor failed: %s\n", e.what());
            bank.errors++;
            bank.stop = true;
        }
    });
    std::this_thread::sleep_for(duration);
    bank.stop = true;
    for (auto &th : threads) th.join();
    auditor.join();
    std::chrono::duration<double> elapsed = clock_type::now() - start;
    bank.audit();  // one last audit with every worker stopped
    stale_writer(bank, keyed);
    return static_cast<double>(std::accumulate(transfers.begin(), transfers.end(), 0L)) / elapsed.count();
}

}  // namespace

int main(int argc, char **argv) {
    int workers = argc > 1 ? std::atoi(argv[1]) : 4;
    int accounts = argc > 2 ? std::atoi(argv[2]) : 64;
    long ms = argc > 3 ? std::atol(argv[3]) : 400;
    if (workers < 1 || accounts < 2 || ms < 1) {
        std::fprintf(stderr, "usage: bank_cpp [workers >= 1] [accounts >= 2] [ms >= 1]\n");
        return 2;
    }
    if (std::strcmp(keylock_version(), KEYLOCK_VERSION) != 0) {
        std::fprintf(stderr, "bank: header %s but library %s\n", KEYLOCK_VERSION, keylock_version());
        return 1;
    }
    try {
        Bank bank(accounts);
        keylock::KeyPool pool;
        keylock::StripedLock striped(1024);
        std::chrono::milliseconds duration(ms);

        std::printf("keylock %s C++ bank: %d workers, %d accounts, %ld ms per primitive\n", keylock_version(), workers,
                    accounts, ms);
        std::printf("  %-12s %12.0f transfers/s\n", "KeyPool", run_phase(bank, pool, workers, duration));
        std::printf("  %-12s %12.0f transfers/s\n", "StripedLock", run_phase(bank, striped, workers, duration));

        std::int64_t final_total = bank.total();
        std::printf("  audits passed: %ld, failed: %ld\n", bank.audits_passed, bank.audits_failed);
        std::printf("  fenced writes refused in transfers: %ld (must be 0)\n", bank.refused_writes.load());
        std::printf("  stale writers stopped by the fence (lease run out, write refused, unlock threw "
                    "LEASE_EXPIRED): %ld of 2\n",
                    bank.stale_writers_stopped);
        std::printf("  final total %" PRId64 ", initial total %" PRId64 ": %s\n", final_total, bank.initial_total,
                    final_total == bank.initial_total ? "match" : "MISMATCH");
        if (bank.errors || bank.audits_failed || bank.audits_passed == 0 || final_total != bank.initial_total ||
            bank.refused_writes != 0 || bank.stale_writers_stopped != 2) {
            std::fprintf(stderr, "bank: FAILED\n");
            return 1;
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "bank: %s\n", e.what());
        return 1;
    }
    return 0;
}
