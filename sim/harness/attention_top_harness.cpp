// Fast simulation harness of attention_top: a Verilator model driven from buffers in memory.
//
// Why by hand: cocotb costs about 0.5 ms of Python per simulated cycle on this design; this
// loop costs a few microseconds. No bus-model library drives a Verilator model from C++
// without a Python or SystemC layer, and the three interfaces here need ~200 lines.
//
// Usage: attention_top_harness SCRIPT DATA RESULTS OUTWORDS
//   SCRIPT   text, one command per line (below), written by sim.fast
//   DATA     little-endian uint32 words: weight-window images and input words, addressed by
//            offset from the commands
//   RESULTS  text written here: one record per line (below)
//   OUTWORDS little-endian uint32 words received on m_axis, in order
//
// Commands (numbers in decimal):
//   seed N                 seed of the idle/backpressure pattern
//   idle P                 probability (0 <= P < 1) that s_axis leaves valid low in a cycle
//                          between words (a raised valid is held, data unchanged, until taken)
//   backpressure P         probability that m_axis_tready is low in a cycle
//   limit N                give up (exit 3, a "timeout" record) after N cycles in one wait
//   reset N                rst high for N cycles, then two idle cycles
//   write ADDR VALUE       AXI4-Lite write (strobes all set)       -> "W resp"
//   read ADDR              AXI4-Lite read                          -> "R value resp"
//   wblock ADDR OFF N      N writes of DATA[OFF..] to ADDR, ADDR+4 ... -> "B errors"
//   send OFF N             queue DATA[OFF..OFF+N) on s_axis, tlast on the final word; the
//                          words go out in the background, in order, while later commands run
//   wait_irq               until irq is high                       -> "I cycle"
//   wait_bits ADDR MASK    read ADDR every 8 cycles until a bit of MASK is set -> "P value"
//   wait_out N             until N packets (tlast words) have been received in all -> "O cycle"
//   wait_sent              until the send queue is empty           -> "S cycle"
//   drop                   empty the send queue (words not yet offered are discarded)
//   cycles N               run N cycles
//   mark                   -> "C cycle"
//   autoread A1 A2 A3      from now on, 4 cycles after each packet's tlast word, read A1..A3
//                          as soon as the bus is free (inside waits) -> "Q packet v1 v2 v3"
//   expect_ok STATUS MASK CAUSE TAG   read STATUS; if a bit of MASK is set, read CAUSE,
//                          write "X tag status cause" and stop with exit status 4
// Whenever a packet's tlast word is received: "E words cycle" (words received so far).
// wait_out also waits for the autoreads of the packets it waited for.
// At the end: "D cycles" (total simulated cycles). Exit status 0; 2 on a bad script or file;
// 3 on a timeout (the record "T what cycle" says where); 4 on an unexpected STATUS.ERROR.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "Vattention_top.h"
#include "verilated.h"

namespace {

// splitmix64: small, fast and good enough for stall patterns.
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    bool chance(double p) { return p > 0.0 && (next() >> 11) * 0x1.0p-53 < p; }
};

struct Word {
    uint32_t data;
    bool last;
};

[[noreturn]] void fail(int code, const char* fmt, const char* arg) {
    std::fprintf(stderr, "attention_top_harness: ");
    std::fprintf(stderr, fmt, arg);
    std::fprintf(stderr, "\n");
    std::exit(code);
}

class Harness {
  public:
    Harness(FILE* results, FILE* outwords)
        : ctx_(new VerilatedContext), top_(new Vattention_top(ctx_.get())), rng_(1),
          results_(results), outwords_(outwords) {
        top_->clk = 0;
        top_->rst = 0;
        top_->eval();
    }
    ~Harness() { top_->final(); }

    double idle = 0.0, backpressure = 0.0;
    uint64_t limit = 50'000'000;
    void seed(uint64_t s) { rng_ = Rng(s); }

    // One clock cycle. Inputs for the cycle are set, the design settles, the handshakes are
    // taken from the values the rising edge samples, then the edge.
    void step() {
        // s_axis source: a raised valid stays until taken; idle only between words.
        if (!s_valid_ && !sendq_.empty() && !rng_.chance(idle)) s_valid_ = true;
        top_->s_axis_tvalid = s_valid_;
        if (s_valid_) {
            top_->s_axis_tdata = sendq_.front().data;
            top_->s_axis_tlast = sendq_.front().last;
        }
        top_->m_axis_tready = !rng_.chance(backpressure);
        top_->clk = 0;
        top_->eval();
        bool s_fire = s_valid_ && top_->s_axis_tready;
        bool m_fire = top_->m_axis_tvalid && top_->m_axis_tready;
        uint32_t m_data = top_->m_axis_tdata;
        bool m_last = top_->m_axis_tlast;
        aw_fire_ = top_->s_axi_awvalid && top_->s_axi_awready;
        w_fire_ = top_->s_axi_wvalid && top_->s_axi_wready;
        b_fire_ = top_->s_axi_bvalid && top_->s_axi_bready;
        ar_fire_ = top_->s_axi_arvalid && top_->s_axi_arready;
        r_fire_ = top_->s_axi_rvalid && top_->s_axi_rready;
        b_resp_ = top_->s_axi_bresp;
        r_data_ = top_->s_axi_rdata;
        r_resp_ = top_->s_axi_rresp;
        top_->clk = 1;
        top_->eval();
        ++cycle_;
        if (s_fire) {
            sendq_.pop_front();
            s_valid_ = false;
        }
        if (m_fire) {
            std::fwrite(&m_data, 4, 1, outwords_);
            ++words_;
            if (m_last) {
                ++packets_;
                std::fprintf(results_, "E %llu %llu\n", (unsigned long long)words_,
                             (unsigned long long)cycle_);
                if (!autoread_.empty()) pending_.push_back({packets_, cycle_ + 4});
            }
        }
    }

    void reset(unsigned n) {
        top_->rst = 1;
        for (unsigned i = 0; i < n; ++i) step();
        top_->rst = 0;
        for (int i = 0; i < 2; ++i) step();
    }

    // AXI4-Lite write: AW and W raised together, held until each is taken, then B.
    unsigned write(uint32_t addr, uint32_t value) {
        top_->s_axi_awaddr = addr;
        top_->s_axi_wdata = value;
        top_->s_axi_wstrb = 0xF;
        top_->s_axi_awvalid = 1;
        top_->s_axi_wvalid = 1;
        top_->s_axi_bready = 1;
        bool aw = false, w = false;
        uint64_t t0 = cycle_;
        while (true) {
            step();
            if (aw_fire_) { aw = true; top_->s_axi_awvalid = 0; }
            if (w_fire_) { w = true; top_->s_axi_wvalid = 0; }
            if (b_fire_) break;
            guard(t0, "AXI4-Lite write");
        }
        top_->s_axi_bready = 0;
        if (!aw || !w) fail(3, "%s", "write response before its address and data were taken");
        return b_resp_;
    }

    void read(uint32_t addr, uint32_t* value, unsigned* resp) {
        top_->s_axi_araddr = addr;
        top_->s_axi_arvalid = 1;
        top_->s_axi_rready = 1;
        uint64_t t0 = cycle_;
        while (true) {
            step();
            if (ar_fire_) top_->s_axi_arvalid = 0;
            if (r_fire_) break;
            guard(t0, "AXI4-Lite read");
        }
        top_->s_axi_rready = 0;
        *value = r_data_;
        *resp = r_resp_;
    }

    void send(const uint32_t* words, size_t n) {
        for (size_t i = 0; i < n; ++i) sendq_.push_back(Word{words[i], i + 1 == n});
    }
    void drop() {
        // A word already offered (valid raised) must stay until taken (AXI4-Stream rule).
        if (s_valid_) {
            Word w = sendq_.front();
            sendq_.clear();
            sendq_.push_back(w);
        } else {
            sendq_.clear();
        }
    }

    template <class Cond>
    void wait(Cond done, const char* what) {
        uint64_t t0 = cycle_;
        while (true) {
            service();
            if (done()) break;
            step();
            guard(t0, what);
        }
    }

    // The autoreads that are due, unless a bus transaction is in progress.
    void service() {
        if (servicing_) return;
        servicing_ = true;
        while (!pending_.empty() && pending_.front().due <= cycle_) {
            Pending p = pending_.front();
            pending_.pop_front();
            std::fprintf(results_, "Q %llu", (unsigned long long)p.packet);
            for (uint32_t addr : autoread_) {
                uint32_t v;
                unsigned r;
                read(addr, &v, &r);
                std::fprintf(results_, " %u", v);
            }
            std::fprintf(results_, "\n");
        }
        servicing_ = false;
    }
    bool reads_pending() const { return !pending_.empty(); }
    std::vector<uint32_t> autoread_;

    bool irq() const { return top_->irq; }
    bool sent() const { return sendq_.empty(); }
    uint64_t packets() const { return packets_; }
    uint64_t cycle() const { return cycle_; }

  private:
    void guard(uint64_t t0, const char* what) {
        if (cycle_ - t0 > limit) {
            std::fprintf(results_, "T %s %llu\n", what, (unsigned long long)cycle_);
            std::fflush(results_);
            fail(3, "timeout: %s", what);
        }
    }

    std::unique_ptr<VerilatedContext> ctx_;
    std::unique_ptr<Vattention_top> top_;
    Rng rng_;
    FILE* results_;
    FILE* outwords_;
    struct Pending {
        uint64_t packet, due;
    };
    std::deque<Pending> pending_;
    bool servicing_ = false;
    std::deque<Word> sendq_;
    bool s_valid_ = false;
    uint64_t cycle_ = 0, words_ = 0, packets_ = 0;
    bool aw_fire_ = false, w_fire_ = false, b_fire_ = false, ar_fire_ = false, r_fire_ = false;
    unsigned b_resp_ = 0, r_resp_ = 0;
    uint32_t r_data_ = 0;
};

std::vector<uint32_t> read_words(const char* path) {
    FILE* f = std::fopen(path, "rb");
    if (!f) fail(2, "cannot open data file %s", path);
    std::vector<uint32_t> words;
    uint32_t buf[4096];
    size_t n;
    while ((n = std::fread(buf, 4, 4096, f)) > 0) words.insert(words.end(), buf, buf + n);
    std::fclose(f);
    return words;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) fail(2, "%s", "usage: attention_top_harness SCRIPT DATA RESULTS OUTWORDS");
    FILE* script = std::fopen(argv[1], "r");
    if (!script) fail(2, "cannot open script %s", argv[1]);
    std::vector<uint32_t> data = read_words(argv[2]);
    FILE* results = std::fopen(argv[3], "w");
    FILE* outwords = std::fopen(argv[4], "wb");
    if (!results || !outwords) fail(2, "%s", "cannot write the result files");

    Harness h(results, outwords);
    char line[512];
    unsigned lineno = 0;
    auto need_data = [&](unsigned long long off, unsigned long long n) {
        if (off + n > data.size()) fail(2, "script line %s: data offset past the end", line);
    };
    while (std::fgets(line, sizeof line, script)) {
        ++lineno;
        char cmd[32];
        unsigned long long a = 0, b = 0, c = 0, d = 0;
        double p = 0.0;
        if (line[0] == '#' || std::sscanf(line, "%31s", cmd) != 1) continue;
        std::string op(cmd);
        if (op == "seed" && std::sscanf(line, "%*s %llu", &a) == 1) {
            h.seed(a);
        } else if (op == "idle" && std::sscanf(line, "%*s %lf", &p) == 1 && p >= 0 && p < 1) {
            h.idle = p;
        } else if (op == "backpressure" && std::sscanf(line, "%*s %lf", &p) == 1 && p >= 0
                   && p < 1) {
            h.backpressure = p;
        } else if (op == "limit" && std::sscanf(line, "%*s %llu", &a) == 1) {
            h.limit = a;
        } else if (op == "reset" && std::sscanf(line, "%*s %llu", &a) == 1) {
            h.reset(unsigned(a));
        } else if (op == "write" && std::sscanf(line, "%*s %llu %llu", &a, &b) == 2) {
            std::fprintf(results, "W %u\n", h.write(uint32_t(a), uint32_t(b)));
        } else if (op == "read" && std::sscanf(line, "%*s %llu", &a) == 1) {
            uint32_t v;
            unsigned r;
            h.read(uint32_t(a), &v, &r);
            std::fprintf(results, "R %u %u\n", v, r);
        } else if (op == "wblock" && std::sscanf(line, "%*s %llu %llu %llu", &a, &b, &c) == 3) {
            need_data(b, c);
            unsigned errors = 0;
            for (unsigned long long i = 0; i < c; ++i)
                errors += h.write(uint32_t(a + 4 * i), data[b + i]) != 0;
            std::fprintf(results, "B %u\n", errors);
        } else if (op == "send" && std::sscanf(line, "%*s %llu %llu", &a, &b) == 2) {
            need_data(a, b);
            h.send(data.data() + a, b);
        } else if (op == "drop") {
            h.drop();
        } else if (op == "wait_irq") {
            h.wait([&] { return h.irq(); }, "wait_irq");
            std::fprintf(results, "I %llu\n", (unsigned long long)h.cycle());
        } else if (op == "wait_bits" && std::sscanf(line, "%*s %llu %llu", &a, &b) == 2) {
            uint32_t v = 0;
            unsigned r;
            uint64_t t0 = h.cycle();
            while (true) {
                h.read(uint32_t(a), &v, &r);
                if (v & b) break;
                for (int i = 0; i < 8; ++i) {
                    h.service();
                    h.step();
                }
                if (h.cycle() - t0 > h.limit) {
                    std::fprintf(results, "T wait_bits %llu\n", (unsigned long long)h.cycle());
                    std::fflush(results);
                    fail(3, "%s", "timeout: wait_bits");
                }
            }
            std::fprintf(results, "P %u\n", v);
        } else if (op == "wait_out" && std::sscanf(line, "%*s %llu", &a) == 1) {
            h.wait([&] { return h.packets() >= a && !h.reads_pending(); }, "wait_out");
            std::fprintf(results, "O %llu\n", (unsigned long long)h.cycle());
        } else if (op == "wait_sent") {
            h.wait([&] { return h.sent(); }, "wait_sent");
            std::fprintf(results, "S %llu\n", (unsigned long long)h.cycle());
        } else if (op == "cycles" && std::sscanf(line, "%*s %llu", &a) == 1) {
            for (unsigned long long i = 0; i < a; ++i) h.step();
        } else if (op == "autoread"
                   && std::sscanf(line, "%*s %llu %llu %llu", &a, &b, &c) == 3) {
            h.autoread_ = {uint32_t(a), uint32_t(b), uint32_t(c)};
        } else if (op == "expect_ok"
                   && std::sscanf(line, "%*s %llu %llu %llu %llu", &a, &b, &c, &d) == 4) {
            uint32_t status, cause;
            unsigned r;
            h.read(uint32_t(a), &status, &r);
            if (status & b) {
                h.read(uint32_t(c), &cause, &r);
                std::fprintf(results, "X %llu %u %u\n", d, status, cause);
                std::fclose(results);
                std::fclose(outwords);
                return 4;
            }
        } else if (op == "mark") {
            std::fprintf(results, "C %llu\n", (unsigned long long)h.cycle());
        } else {
            line[std::strcspn(line, "\n")] = 0;
            fail(2, "bad script line: %s", line);
        }
    }
    h.wait([&] { return !h.reads_pending(); }, "the final autoreads");
    std::fprintf(results, "D %llu\n", (unsigned long long)h.cycle());
    std::fclose(results);
    std::fclose(outwords);
    std::fclose(script);
    return 0;
}
