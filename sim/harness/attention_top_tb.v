// Fast simulation harness of attention_top for Icarus Verilog: the C++ harness
// (attention_top_harness.cpp) as a Verilog testbench, so that Icarus runs the same scripts
// with no Python per cycle (cocotb costs Icarus most of its time on this design).
//
// Same commands, records, stall generator (splitmix64) and cycle semantics as the C++
// harness; the two give the same records for the same script. Differences, for the file
// formats Verilog reads and writes easily:
//   DATA      text, one hex word per line ($readmemh), +data=PATH +words=N
//   OUTWORDS  text, one hex word per line
//   exit      the last record is "Z code" (the C++ harness's exit status: 0, 2, 3 or 4)
// Plusargs: +script=PATH +data=PATH +words=N +results=PATH +outwords=PATH.
// Parameter ADDR_W: the width of s_axi_awaddr/araddr of the design.

module attention_top_tb;
    parameter ADDR_W = 17;
    parameter MAX_WORDS = 1 << 23;      // the data file's words at most
    parameter MAX_SENDS = 4096;         // send commands queued at once at most

    reg clk = 0, rst = 0;
    reg [ADDR_W-1:0] s_axi_awaddr = 0, s_axi_araddr = 0;
    reg s_axi_awvalid = 0, s_axi_wvalid = 0, s_axi_bready = 0, s_axi_arvalid = 0;
    reg s_axi_rready = 0;
    reg [31:0] s_axi_wdata = 0;
    reg [3:0] s_axi_wstrb = 0;
    reg [31:0] s_axis_tdata = 0;
    reg s_axis_tvalid = 0, s_axis_tlast = 0, m_axis_tready = 0;
    wire s_axi_awready, s_axi_wready, s_axi_bvalid, s_axi_arready, s_axi_rvalid;
    wire [1:0] s_axi_bresp, s_axi_rresp;
    wire [31:0] s_axi_rdata, m_axis_tdata;
    wire s_axis_tready, m_axis_tvalid, m_axis_tlast, irq;

    attention_top dut (
        .clk(clk), .rst(rst),
        .s_axi_awaddr(s_axi_awaddr), .s_axi_awvalid(s_axi_awvalid),
        .s_axi_awready(s_axi_awready), .s_axi_wdata(s_axi_wdata), .s_axi_wstrb(s_axi_wstrb),
        .s_axi_wvalid(s_axi_wvalid), .s_axi_wready(s_axi_wready), .s_axi_bresp(s_axi_bresp),
        .s_axi_bvalid(s_axi_bvalid), .s_axi_bready(s_axi_bready),
        .s_axi_araddr(s_axi_araddr), .s_axi_arvalid(s_axi_arvalid),
        .s_axi_arready(s_axi_arready), .s_axi_rdata(s_axi_rdata), .s_axi_rresp(s_axi_rresp),
        .s_axi_rvalid(s_axi_rvalid), .s_axi_rready(s_axi_rready),
        .s_axis_tdata(s_axis_tdata), .s_axis_tvalid(s_axis_tvalid),
        .s_axis_tlast(s_axis_tlast), .s_axis_tready(s_axis_tready),
        .m_axis_tdata(m_axis_tdata), .m_axis_tvalid(m_axis_tvalid),
        .m_axis_tlast(m_axis_tlast), .m_axis_tready(m_axis_tready), .irq(irq));

    reg [31:0] data [0:MAX_WORDS-1];
    integer n_words, fd_script, fd_res, fd_out;

    // ------------------------------------------------------------ stall generator
    reg [63:0] rng_s;
    real idle = 0.0, backpressure = 0.0;
    reg [63:0] limit = 64'd50000000;

    function [63:0] rng_next;
        input dummy;
        reg [63:0] z;
        begin
            rng_s = rng_s + 64'h9e3779b97f4a7c15;
            z = rng_s;
            z = (z ^ (z >> 30)) * 64'hbf58476d1ce4e5b9;
            z = (z ^ (z >> 27)) * 64'h94d049bb133111eb;
            rng_next = z ^ (z >> 31);
        end
    endfunction

    function chance;
        input real p;
        reg [63:0] v;
        real r;
        begin
            chance = 0;
            if (p > 0.0) begin
                v = rng_next(0) >> 11;
                r = v;
                chance = r * (1.0 / 9007199254740992.0) < p;     // 2**-53
            end
        end
    endfunction

    // ------------------------------------------------------------ send queue
    // Segments of DATA: offset, count, and whether the segment's final word carries tlast.
    reg [31:0] seg_off [0:MAX_SENDS-1];
    reg [31:0] seg_n [0:MAX_SENDS-1];
    reg seg_last [0:MAX_SENDS-1];
    integer seg_head = 0, seg_tail = 0, seg_pos = 0;
    reg s_valid = 0;

    // ------------------------------------------------------------ state of a cycle
    reg [63:0] cycle = 0, words_rx = 0, packets = 0;
    reg aw_fire, w_fire, b_fire, ar_fire, r_fire, s_fire, m_fire, m_last;
    reg [1:0] b_resp, r_resp;
    reg [31:0] r_data, m_data;
    // autoreads: registers read 4 cycles after each packet's tlast word
    reg [31:0] auto_addr [0:2];
    reg autoread_on = 0;
    reg [63:0] pend_packet [0:MAX_SENDS-1];
    reg [63:0] pend_due [0:MAX_SENDS-1];
    integer pend_head = 0, pend_tail = 0;
    reg servicing = 0;
    reg timed_out = 0;

    task finish_with;
        input integer code;
        begin
            $fwrite(fd_res, "Z %0d\n", code);
            $fclose(fd_res);
            $fclose(fd_out);
            $finish;
            #1000;      // (nothing after $finish runs)
        end
    endtask

    // One clock cycle: the inputs for the cycle are set, the design settles, the handshakes
    // are taken from the values the rising edge samples, then the edge.
    task step;
        begin
            // (nested: Verilog's && need not short-circuit, and chance draws from the RNG)
            if (!s_valid && seg_head != seg_tail) begin
                if (!chance(idle)) s_valid = 1;
            end
            s_axis_tvalid = s_valid;
            if (s_valid) begin
                s_axis_tdata = data[seg_off[seg_head] + seg_pos];
                s_axis_tlast = seg_last[seg_head] && seg_pos + 1 == seg_n[seg_head];
            end
            m_axis_tready = !chance(backpressure);
            clk = 0;
            #5;
            s_fire = s_valid && s_axis_tready;
            m_fire = m_axis_tvalid && m_axis_tready;
            m_data = m_axis_tdata;
            m_last = m_axis_tlast;
            aw_fire = s_axi_awvalid && s_axi_awready;
            w_fire = s_axi_wvalid && s_axi_wready;
            b_fire = s_axi_bvalid && s_axi_bready;
            ar_fire = s_axi_arvalid && s_axi_arready;
            r_fire = s_axi_rvalid && s_axi_rready;
            b_resp = s_axi_bresp;
            r_data = s_axi_rdata;
            r_resp = s_axi_rresp;
            clk = 1;
            #5;
            cycle = cycle + 1;
            if (s_fire) begin
                s_valid = 0;
                seg_pos = seg_pos + 1;
                if (seg_pos == seg_n[seg_head]) begin
                    seg_pos = 0;
                    seg_head = (seg_head + 1) % MAX_SENDS;
                end
            end
            if (m_fire) begin
                $fwrite(fd_out, "%08x\n", m_data);
                words_rx = words_rx + 1;
                if (m_last) begin
                    packets = packets + 1;
                    $fwrite(fd_res, "E %0d %0d\n", words_rx, cycle);
                    if (autoread_on) begin
                        pend_packet[pend_tail] = packets;
                        pend_due[pend_tail] = cycle + 4;
                        pend_tail = (pend_tail + 1) % MAX_SENDS;
                    end
                end
            end
        end
    endtask

    task guard;
        input [63:0] t0;
        input [8*24-1:0] what;
        begin
            if (cycle - t0 > limit) begin
                $fwrite(fd_res, "T %0s %0d\n", what, cycle);
                finish_with(3);
            end
        end
    endtask

    task reset_for;
        input integer n;
        integer i;
        begin
            rst = 1;
            for (i = 0; i < n; i = i + 1) step;
            rst = 0;
            step;
            step;
        end
    endtask

    // AXI4-Lite write: AW and W raised together, held until each is taken, then B.
    task axil_write;
        input [31:0] addr;
        input [31:0] value;
        output [1:0] resp;
        reg aw, w;
        reg [63:0] t0;
        begin
            s_axi_awaddr = addr;
            s_axi_wdata = value;
            s_axi_wstrb = 4'hF;
            s_axi_awvalid = 1;
            s_axi_wvalid = 1;
            s_axi_bready = 1;
            aw = 0;
            w = 0;
            t0 = cycle;
            b_fire = 0;
            while (!b_fire) begin
                step;
                if (aw_fire) begin aw = 1; s_axi_awvalid = 0; end
                if (w_fire) begin w = 1; s_axi_wvalid = 0; end
                if (!b_fire) guard(t0, "AXI4-Lite write");
            end
            s_axi_bready = 0;
            if (!aw || !w) begin
                $display("attention_top_tb: write response before its address and data");
                finish_with(3);
            end
            resp = b_resp;
        end
    endtask

    task axil_read;
        input [31:0] addr;
        output [31:0] value;
        output [1:0] resp;
        reg [63:0] t0;
        begin
            s_axi_araddr = addr;
            s_axi_arvalid = 1;
            s_axi_rready = 1;
            t0 = cycle;
            r_fire = 0;
            while (!r_fire) begin
                step;
                if (ar_fire) s_axi_arvalid = 0;
                if (!r_fire) guard(t0, "AXI4-Lite read");
            end
            s_axi_rready = 0;
            value = r_data;
            resp = r_resp;
        end
    endtask

    // The autoreads that are due, unless a bus transaction is in progress.
    task service;
        integer k;
        reg [31:0] v;
        reg [1:0] r;
        begin
            if (!servicing) begin
                servicing = 1;
                while (pend_head != pend_tail && pend_due[pend_head] <= cycle) begin
                    $fwrite(fd_res, "Q %0d", pend_packet[pend_head]);
                    pend_head = (pend_head + 1) % MAX_SENDS;
                    for (k = 0; k < 3; k = k + 1) begin
                        axil_read(auto_addr[k], v, r);
                        $fwrite(fd_res, " %0d", v);
                    end
                    $fwrite(fd_res, "\n");
                end
                servicing = 0;
            end
        end
    endtask

    // ------------------------------------------------------------ the script
    reg [8*512-1:0] line;
    reg [8*32-1:0] cmd;
    reg [63:0] a, b, c, d, t0;
    real p;
    reg [31:0] v, status, cause;
    reg [1:0] resp;
    integer n, i, errors, lineno, waiting;
    reg [8*1024-1:0] path;

    initial begin
        if (!$value$plusargs("script=%s", path)) begin
            $display("attention_top_tb: +script=PATH missing");
            $finish;
        end
        fd_script = $fopen(path, "r");
        if (!$value$plusargs("results=%s", path)) begin
            $display("attention_top_tb: +results=PATH missing");
            $finish;
        end
        fd_res = $fopen(path, "w");
        if (!$value$plusargs("outwords=%s", path)) begin
            $display("attention_top_tb: +outwords=PATH missing");
            $finish;
        end
        fd_out = $fopen(path, "w");
        if (!$value$plusargs("words=%d", n_words)) n_words = 0;
        if (n_words > MAX_WORDS) begin
            $display("attention_top_tb: %0d data words, more than MAX_WORDS", n_words);
            finish_with(2);
        end
        if (n_words > 0) begin
            if (!$value$plusargs("data=%s", path)) begin
                $display("attention_top_tb: +data=PATH missing");
                finish_with(2);
            end
            $readmemh(path, data, 0, n_words - 1);
        end
        rng_s = 1;
        lineno = 0;
        while (!$feof(fd_script)) begin
            line = 0;
            n = $fgets(line, fd_script);
            lineno = lineno + 1;
            cmd = 0;
            if (n > 0 && $sscanf(line, "%s", cmd) == 1 && cmd[8*32-1:0] != 0
                    && line[8*n-1 -: 8] != "#") begin
                a = 0; b = 0; c = 0; d = 0;
                if (cmd == "seed") begin
                    n = $sscanf(line, "%s %d", cmd, a);
                    rng_s = a;
                end else if (cmd == "idle") begin
                    n = $sscanf(line, "%s %f", cmd, p);
                    idle = p;
                end else if (cmd == "backpressure") begin
                    n = $sscanf(line, "%s %f", cmd, p);
                    backpressure = p;
                end else if (cmd == "limit") begin
                    n = $sscanf(line, "%s %d", cmd, a);
                    limit = a;
                end else if (cmd == "reset") begin
                    n = $sscanf(line, "%s %d", cmd, a);
                    reset_for(a);
                end else if (cmd == "write") begin
                    n = $sscanf(line, "%s %d %d", cmd, a, b);
                    axil_write(a, b, resp);
                    $fwrite(fd_res, "W %0d\n", resp);
                end else if (cmd == "read") begin
                    n = $sscanf(line, "%s %d", cmd, a);
                    axil_read(a, v, resp);
                    $fwrite(fd_res, "R %0d %0d\n", v, resp);
                end else if (cmd == "wblock") begin
                    n = $sscanf(line, "%s %d %d %d", cmd, a, b, c);
                    if (b + c > n_words) begin
                        $display("attention_top_tb: line %0d: data offset past the end", lineno);
                        finish_with(2);
                    end
                    errors = 0;
                    for (i = 0; i < c; i = i + 1) begin
                        axil_write(a + 4 * i, data[b + i], resp);
                        if (resp != 0) errors = errors + 1;
                    end
                    $fwrite(fd_res, "B %0d\n", errors);
                end else if (cmd == "send") begin
                    n = $sscanf(line, "%s %d %d", cmd, a, b);
                    if (a + b > n_words) begin
                        $display("attention_top_tb: line %0d: data offset past the end", lineno);
                        finish_with(2);
                    end
                    if (b > 0) begin
                        if ((seg_tail + 1) % MAX_SENDS == seg_head) begin
                            $display("attention_top_tb: more than %0d sends queued", MAX_SENDS);
                            finish_with(2);
                        end
                        seg_off[seg_tail] = a;
                        seg_n[seg_tail] = b;
                        seg_last[seg_tail] = 1;
                        seg_tail = (seg_tail + 1) % MAX_SENDS;
                    end
                end else if (cmd == "drop") begin
                    // A word already offered (valid raised) stays until taken (AXI4-Stream).
                    if (s_valid) begin
                        seg_off[seg_head] = seg_off[seg_head] + seg_pos;
                        seg_last[seg_head] = seg_last[seg_head]
                                             && seg_pos + 1 == seg_n[seg_head];
                        seg_n[seg_head] = 1;
                        seg_pos = 0;
                        seg_tail = (seg_head + 1) % MAX_SENDS;
                    end else begin
                        seg_head = seg_tail;
                        seg_pos = 0;
                    end
                end else if (cmd == "wait_irq") begin
                    t0 = cycle;
                    waiting = 1;
                    while (waiting) begin
                        service;
                        if (irq) waiting = 0;
                        else begin step; guard(t0, "wait_irq"); end
                    end
                    $fwrite(fd_res, "I %0d\n", cycle);
                end else if (cmd == "wait_bits") begin
                    n = $sscanf(line, "%s %d %d", cmd, a, b);
                    t0 = cycle;
                    waiting = 1;
                    while (waiting) begin
                        axil_read(a, v, resp);
                        if (v & b) waiting = 0;
                        else begin
                            for (i = 0; i < 8; i = i + 1) begin
                                service;
                                step;
                            end
                            if (cycle - t0 > limit) begin
                                $fwrite(fd_res, "T wait_bits %0d\n", cycle);
                                finish_with(3);
                            end
                        end
                    end
                    $fwrite(fd_res, "P %0d\n", v);
                end else if (cmd == "wait_out") begin
                    n = $sscanf(line, "%s %d", cmd, a);
                    t0 = cycle;
                    waiting = 1;
                    while (waiting) begin
                        service;
                        if (packets >= a && pend_head == pend_tail) waiting = 0;
                        else begin step; guard(t0, "wait_out"); end
                    end
                    $fwrite(fd_res, "O %0d\n", cycle);
                end else if (cmd == "wait_sent") begin
                    t0 = cycle;
                    waiting = 1;
                    while (waiting) begin
                        service;
                        if (seg_head == seg_tail) waiting = 0;
                        else begin step; guard(t0, "wait_sent"); end
                    end
                    $fwrite(fd_res, "S %0d\n", cycle);
                end else if (cmd == "cycles") begin
                    n = $sscanf(line, "%s %d", cmd, a);
                    for (t0 = 0; t0 < a; t0 = t0 + 1) step;
                end else if (cmd == "autoread") begin
                    n = $sscanf(line, "%s %d %d %d", cmd, a, b, c);
                    auto_addr[0] = a;
                    auto_addr[1] = b;
                    auto_addr[2] = c;
                    autoread_on = 1;
                end else if (cmd == "expect_ok") begin
                    n = $sscanf(line, "%s %d %d %d %d", cmd, a, b, c, d);
                    axil_read(a, status, resp);
                    if (status & b) begin
                        axil_read(c, cause, resp);
                        $fwrite(fd_res, "X %0d %0d %0d\n", d, status, cause);
                        finish_with(4);
                    end
                end else if (cmd == "mark") begin
                    $fwrite(fd_res, "C %0d\n", cycle);
                end else begin
                    $display("attention_top_tb: bad script line %0d", lineno);
                    finish_with(2);
                end
            end
        end
        t0 = cycle;
        waiting = 1;
        while (waiting) begin
            service;
            if (pend_head == pend_tail) waiting = 0;
            else begin step; guard(t0, "the final autoreads"); end
        end
        $fwrite(fd_res, "D %0d\n", cycle);
        finish_with(0);
    end
endmodule
