// AXI4-Stream handshake rules (AMBA 4 AXI4-Stream Protocol Specification, ARM IHI 0051,
// 2.2.1 "Handshake process"), as properties for SymbiYosys.
//
// ``MASTER = 1``: the design drives this stream (asserted): after TVALID rises it stays high,
// with TDATA and TLAST unchanged, until TREADY; TVALID is low the cycle after a reset.
// ``MASTER = 0``: the design receives it (the same rules assumed of the environment; TVALID
// low during reset and the cycle after).
// Clock: rising edge; reset: synchronous, active high (``rst``).

module axis_props #(
    parameter W = 32,
    parameter MASTER = 1
) (
    input clk, input rst,
    input [W-1:0] tdata, input tlast, input tvalid, input tready
);
    reg f_past_valid = 1'b0;
    always @(posedge clk) f_past_valid <= 1'b1;

    generate if (MASTER) begin : as_master
        always @(posedge clk) if (f_past_valid) begin
            if ($past(rst)) assert(!tvalid);
            else if (!rst && $past(tvalid && !tready)) begin
                assert(tvalid);
                assert(tdata == $past(tdata));
                assert(tlast == $past(tlast));
            end
        end
    end else begin : as_slave
        always @(*) if (rst) assume(!tvalid);
        always @(posedge clk) if (f_past_valid) begin
            if ($past(rst)) assume(!tvalid);
            else if (!rst && $past(tvalid && !tready)) begin
                assume(tvalid); assume(tdata == $past(tdata)); assume(tlast == $past(tlast));
            end
        end
    end endgenerate
endmodule
