"""AttentionConfig validation, loading and round trips."""

import re
import tomllib
from pathlib import Path

import pytest

from golden.config import AttentionConfig, ConfigError, config_from_dict, load_config

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted((REPO / "configs").glob("*.toml"))


def test_three_shipped_configs():
    assert {p.stem for p in SHIPPED} >= {"tiny", "default", "bert-base"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_config_loads_and_round_trips(path):
    cfg = load_config(path)
    assert cfg.name == path.stem
    assert cfg.d_model == cfg.heads * cfg.head_dim
    again = config_from_dict(__import__("tomllib").loads(cfg.to_toml()))
    assert again == cfg
    # The JSON export's derived section is ignored on load.
    assert config_from_dict(__import__("json").loads(cfg.to_json())) == cfg


@pytest.mark.parametrize("changes, field", [
    (dict(d_model=60, heads=4, head_dim=16), "d_model"),
    (dict(d_model=0), "d_model"),
    (dict(heads=0, d_model=0), "heads"),
    (dict(head_dim=0), "head_dim"),
    (dict(max_seq_len=0, max_kv_len=0), "max_seq_len"),
    (dict(max_kv_len=0), "max_kv_len"),
    (dict(max_kv_len=16, cross_attention=False), "max_kv_len"),
    (dict(act_bits=1), "act_bits"),
    (dict(prob_bits=0), "prob_bits"),
    (dict(exp_table_size=2, exp_frac_bits=20), "exp_frac_bits"),   # 19 interpolation bits
    (dict(acc_bits=20), "acc_bits"),            # 64 * 128 * 128 needs 21 bits + sign
    (dict(bias_bits=40), "bias_bits"),
    (dict(requant_mult_bits=32), "requant_mult_bits"),
    (dict(array_rows=64), "array_rows"),        # larger than the longest sequence (32)
    (dict(array_cols=128, d_model=64), "array_cols"),
    (dict(array_rows=1), "array_rows"),
    (dict(engines=5), "engines"),               # more engines than heads
    (dict(exp_table_size=12), "exp_table_size"),
    (dict(exp_frac_bits=3), "exp_frac_bits"),   # fewer than log2(16) index bits
    (dict(recip_bits=4), "recip_bits"),
    (dict(softmax_lanes=0), "softmax_lanes"),
    (dict(heads=4.0), "heads"),
    (dict(act_bits="8"), "act_bits"),
    (dict(act_bits=True), "act_bits"),
    (dict(causal_mask=1), "causal_mask"),
    (dict(channel_scales="yes"), "channel_scales"),
    # a scale-table word holds the multiplier in 24 bits
    (dict(channel_scales=True, acc_bits=32, requant_mult_bits=25), "requant_mult_bits"),
    (dict(name=""), "name"),
])
def test_invalid_config_names_field(changes, field):
    with pytest.raises(ConfigError, match=field):
        AttentionConfig(**changes)


@pytest.mark.parametrize("changes, needle", [
    (dict(additive_lanes=17), "additive_lanes = 17 is out of range: allowed 0..16"),
    (dict(additive_lanes=-1), "additive_lanes = -1 is out of range"),
    (dict(additive_lanes=2, kv_tile=4, q_tile=4), "whole-row path only (allowed kv_tile = 0)"),
    (dict(additive_lanes=2, head_dim=6, d_model=12, heads=2),
     "head_dim = 6 must be a multiple of 4 with additive_lanes"),
])
def test_additive_scorer_limits(changes, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        AttentionConfig(**changes)
    assert AttentionConfig(additive_lanes=16).additive and not AttentionConfig().additive


@pytest.mark.parametrize("changes, needle", [
    (dict(requant_lanes=5), "requant_lanes = 5 is out of range: allowed 0..4"),
    (dict(requant_lanes=-1), "requant_lanes = -1 is out of range"),
    (dict(requant_lanes=3, array_cols=8, d_model=64), "requant_lanes = 3 must divide "
                                                      "array_cols = 8"),
])
def test_requantizer_lane_limits(changes, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        AttentionConfig(**changes)


def test_requantizer_lanes_set_the_tile_spacing():
    full = AttentionConfig(array_rows=6, array_cols=8, d_model=64)
    assert (full.requant_passes, full.min_tile_steps) == (1, 8)
    half = full.replace(requant_lanes=4)
    assert (half.requant_passes, half.min_tile_steps) == (2, 12)
    assert full.replace(requant_lanes=8).min_tile_steps == 8
    assert full.replace(requant_lanes=1).min_tile_steps == 48


def test_accumulator_too_narrow_names_product_and_width():
    with pytest.raises(ConfigError, match=r"acc_bits = 16 is too narrow.*projection"):
        AttentionConfig(acc_bits=16, bias_bits=16, requant_mult_bits=16)


def test_unknown_toml_key_and_section(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nd_model = 64\nhead = 4\n')
    with pytest.raises(ConfigError, match=r"unknown key model\.head"):
        load_config(bad)
    bad.write_text('[modle]\nd_model = 64\n')
    with pytest.raises(ConfigError, match="modle"):
        load_config(bad)


def test_wrong_type_in_toml(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nheads = "four"\n')
    with pytest.raises(ConfigError, match=r"bad\.toml.*heads must be an integer"):
        load_config(bad)
    bad.write_text('[features]\ncausal_mask = "yes"\n')
    with pytest.raises(ConfigError, match="causal_mask must be true or false"):
        load_config(bad)


def test_missing_and_malformed_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_derived_widths_of_tiny():
    cfg = load_config(REPO / "configs/tiny.toml")
    # 8 products of two int8 reach 8 * 2^14 = 2^17: 18 magnitude bits + sign.
    assert cfg.score_bits == 19
    # exp_bits = B + max(clog2 N, 5) + 3: short rows get the floor of 5.
    assert cfg.exp_bits == 8 + 5 + 3
    assert cfg.sum_bits == cfg.exp_bits + 3 + 1
    assert (cfg.exp_frac_bits, cfg.exp_table_size) == (12, 32)
    assert cfg.exp_interp_bits == 12 - 5


@pytest.mark.parametrize("kv_len, exp_bits", [(2, 16), (8, 16), (16, 16), (31, 16), (32, 16),
                                              (33, 17), (128, 18), (512, 20)])
def test_exp_bits_floor_for_short_rows(kv_len, exp_bits):
    cfg = load_config(REPO / "configs/default.toml").replace(
        max_kv_len=kv_len, max_seq_len=kv_len, array_rows=2, array_cols=2, requant_lanes=0)
    assert cfg.exp_bits == exp_bits


@pytest.mark.parametrize("changes, message", [
    (dict(act_bits=12, acc_bits=40), r"act_bits = 12 is out of range: allowed 8 or 16"),
    (dict(act_bits=4), r"act_bits = 4 is out of range: allowed 8\.\.16"),
    (dict(act_bits=16), r"acc_bits = 32 is too narrow: the score Q.K\^T .* needs acc_bits >= 36"),
    (dict(act_bits=16, acc_bits=40, additive_lanes=2),
     r"additive_lanes = 2 with act_bits = 16: the additive scorer takes int8 Q and K"),
    (dict(act_bits=16, acc_bits=40, pos_enc=["1d"]),
     r"pos_enc = \['1d'\] with act_bits = 16: the positional encoder adds to int8 inputs"),
    (dict(weight_bits=16), r"weight_bits = 16 is out of range: allowed 8\.\.8"),
    (dict(prob_bits=17, recip_bits=17), r"prob_bits = 17 is out of range: allowed 2\.\.16"),
    (dict(prob_bits=16, recip_bits=16),
     r"exp_table_size = 16 is too small for prob_bits = 16: a step between table entries is "
     r"19 bits, more than one 18-bit multiplier operand"),
    (dict(prob_bits=16, recip_bits=12, exp_table_size=32),
     r"recip_bits = 12 is out of range: allowed 16\.\.24"),
    (dict(exp_table_size=16, exp_frac_bits=23),
     r"exp_frac_bits = 23 is out of range: allowed 4\.\.22"),
])
def test_generator_limits_are_config_errors(changes, message):
    """What the generated hardware cannot build is refused by the configuration itself, with
    the field, the value and the allowed range (not a ValueError from elaboration)."""
    with pytest.raises(ConfigError, match=message):
        AttentionConfig(**changes)


def test_softmax_builds_at_the_widest_interpolation_fraction():
    """exp_frac_bits = log2(exp_table_size) + 18, the largest the validation allows, elaborates
    (one more bit is the 18-bit DSP operand limit the check stands for)."""
    from amaranth.hdl import Fragment
    from hw.blocks.softmax import SoftmaxUnit
    cfg = load_config(REPO / "configs/tiny.toml").replace(exp_table_size=2, exp_frac_bits=19)
    assert cfg.exp_interp_bits == 18
    Fragment.get(SoftmaxUnit(cfg), None)


def test_name_with_quote_and_backslash_round_trips(tmp_path):
    cfg = load_config(REPO / "configs/tiny.toml").replace(name='a "quoted" C:\\path\\x')
    path = tmp_path / "config.toml"
    path.write_text(cfg.to_toml())
    assert load_config(path) == cfg


@pytest.mark.parametrize("changes,message", [
    (dict(kv_tile=12, q_tile=6), "kv_tile = 12 must be a multiple of array_cols = 8"),
    (dict(kv_tile=16), "q_tile = 0 is out of range: allowed 6..64"),
    (dict(kv_tile=16, q_tile=8), "q_tile = 8 must be a multiple of array_rows = 6"),
    (dict(q_tile=6), "q_tile = 6 needs kv_tile > 0"),
    (dict(kv_tile=16, q_tile=6, tile_norm_lanes=3), "tile_norm_lanes = 3 must divide"),
    (dict(kv_tile=72), "kv_tile = 72 is out of range: allowed 0..64"),
])
def test_tiling_limits_are_named(changes, message):
    base = load_config(REPO / "configs" / "default.toml")
    with pytest.raises(ConfigError, match=re.escape(message)):
        base.replace(**changes)


def test_tiled_acc_bits_limit():
    base = load_config(REPO / "configs" / "default.toml")
    with pytest.raises(ConfigError, match="too large for acc_bits = 24"):
        base.replace(acc_bits=24, bias_bits=16, kv_tile=64, q_tile=6)


def test_long_config_round_trips():
    cfg = load_config(REPO / "configs" / "long.toml")
    assert cfg.tiled and (cfg.kv_tile, cfg.q_tile) == (64, 48)
    assert config_from_dict(tomllib.loads(cfg.to_toml())) == cfg.replace(name="long")


@pytest.mark.parametrize("changes,message", [
    (dict(pos_enc="1d"), "pos_enc must be a list of modes (1d, 2d), not '1d'"),
    (dict(pos_enc=["1d", "3d"]), "pos_enc = ['1d', '3d']: allowed a list of distinct modes"),
    (dict(pos_enc=["1d", "1d"]), "allowed a list of distinct modes"),
    (dict(max_position=64), "max_position = 64 needs a pos_enc mode"),
    (dict(pos_enc=["1d"], max_position=65536), "max_position = 65536 is out of range: "
                                               "allowed 0..65535"),
    (dict(pos_enc=["2d"], d_model=12, heads=3, head_dim=4),
     "d_model = 12 must be a multiple of 8 with pos_enc"),
])
def test_pos_enc_limits_are_named(changes, message):
    base = load_config(REPO / "configs" / "tiny.toml")
    with pytest.raises(ConfigError, match=re.escape(message)):
        base.replace(**changes)


def test_pos_enc_round_trips_in_canonical_order(tmp_path):
    cfg = load_config(REPO / "configs" / "tiny.toml").replace(pos_enc=["2d", "1d"],
                                                            max_position=20)
    assert cfg.pos_enc == ("1d", "2d") and cfg.positions == 20
    path = tmp_path / "pe.toml"
    path.write_text(cfg.to_toml())
    assert load_config(path) == cfg
    assert cfg.replace(max_position=0).positions == cfg.max_seq_len


def test_bias_is_one_window_word():
    """bias_bits > 32 would need two window words per bias, which the hardware does not
    decode: refused by name."""
    with pytest.raises(ConfigError, match=re.escape("bias_bits = 40 is out of range: allowed "
                                                    "1..32")):
        AttentionConfig(acc_bits=44, bias_bits=40)
