// AXI4-Lite slave interface rules (AMBA AXI and ACE Protocol Specification, ARM IHI 0022,
// chapters A3 "Channel handshake" and B1 "AXI4-Lite"), as properties for SymbiYosys.
//
// Bound beside a slave, this module *assumes* the rules that bind the master (the slave's
// inputs) and, with CHECK_SLAVE = 1, *asserts* the rules that bind the slave (its outputs):
//
//   reset      A3.1.2  no VALID during reset; the slave's BVALID/RVALID low the cycle after.
//   handshake  A3.2.1  a raised VALID stays high, its payload unchanged, until READY.
//   ordering   A3.3.1  a write response only after both its AW and W handshakes (never in the
//                      same cycle); a read response only after its AR handshake.
//   count              one response per request: the number of accepted requests not yet
//                      answered never goes negative and never exceeds MAX_WRITES/MAX_READS
//                      (the slave's own buffering, a parameter).
//   response   B1.1    AXI4-Lite has no EXOKAY: BRESP/RRESP are OKAY, SLVERR or DECERR.
//
// The outstanding-request counts leave as outputs, so a design's own invariants (which
// k-induction needs) can be written against them beside the instance.
// Clock: rising edge; reset: synchronous, active high (``rst``).

module axil_slave_props #(
    parameter AW = 8,
    parameter MAX_WRITES = 2,
    parameter MAX_READS = 1,
    // 0: only the master's rules (assumed), for a check whose subject is something else
    parameter CHECK_SLAVE = 1
) (
    input clk, input rst,
    input [AW-1:0] awaddr, input awvalid, input awready,
    input [31:0] wdata, input [3:0] wstrb, input wvalid, input wready,
    input [1:0] bresp, input bvalid, input bready,
    input [AW-1:0] araddr, input arvalid, input arready,
    input [31:0] rdata, input [1:0] rresp, input rvalid, input rready,
    output reg [3:0] f_aw_pending, output reg [3:0] f_w_pending, output reg [3:0] f_ar_pending
);
    reg f_past_valid = 1'b0;
    always @(posedge clk) f_past_valid <= 1'b1;

    // The trace starts in reset.
    always @(*) if (!f_past_valid) assume(rst);

    // ---------------------------------------------------------------- the master (assumed)
    // reset (A3.1.2): no VALID during reset and the cycle after
    always @(*) if (rst) begin
        assume(!awvalid);
        assume(!wvalid);
        assume(!arvalid);
    end
    always @(posedge clk) if (f_past_valid && $past(rst)) begin
        assume(!awvalid);
        assume(!wvalid);
        assume(!arvalid);
    end
    // handshake (A3.2.1)
    always @(posedge clk) if (f_past_valid && !$past(rst) && !rst) begin
        if ($past(awvalid && !awready)) begin
            assume(awvalid);
            assume(awaddr == $past(awaddr));
        end
        if ($past(wvalid && !wready)) begin
            assume(wvalid);
            assume(wdata == $past(wdata));
            assume(wstrb == $past(wstrb));
        end
        if ($past(arvalid && !arready)) begin
            assume(arvalid);
            assume(araddr == $past(araddr));
        end
    end

    // Requests accepted and not yet answered.
    always @(posedge clk)
        if (rst) begin
            f_aw_pending <= 0; f_w_pending <= 0; f_ar_pending <= 0;
        end else begin
            f_aw_pending <= f_aw_pending + (awvalid && awready) - (bvalid && bready);
            f_w_pending <= f_w_pending + (wvalid && wready) - (bvalid && bready);
            f_ar_pending <= f_ar_pending + (arvalid && arready) - (rvalid && rready);
        end

    // ---------------------------------------------------------------- the slave (asserted)
    generate if (CHECK_SLAVE) begin : slave
        // reset (A3.1.2)
        always @(posedge clk) if (f_past_valid && $past(rst)) begin
            assert(!bvalid);
            assert(!rvalid);
        end
        // handshake (A3.2.1)
        always @(posedge clk) if (f_past_valid && !$past(rst) && !rst) begin
            if ($past(bvalid && !bready)) begin
                assert(bvalid);
                assert(bresp == $past(bresp));
            end
            if ($past(rvalid && !rready)) begin
                assert(rvalid);
                assert(rdata == $past(rdata));
                assert(rresp == $past(rresp));
            end
        end
        // ordering (A3.3.1), count, response codes (B1.1)
        always @(*) if (f_past_valid && !rst) begin
            if (bvalid) begin
                assert(f_aw_pending != 0);
                assert(f_w_pending != 0);
                assert(bresp != 2'b01);
            end
            if (rvalid) begin
                assert(f_ar_pending != 0);
                assert(rresp != 2'b01);
            end
            assert(f_aw_pending <= MAX_WRITES);
            assert(f_w_pending <= MAX_WRITES);
            assert(f_ar_pending <= MAX_READS);
        end
    end endgenerate
endmodule
