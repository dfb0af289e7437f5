"""Local preprocessing of a site's features into a FeatureBlock.

Statistics come from the site's own training table only: raw features never leave a site, so
neither may anything fitted on another party's rows or on the test rows. Categorical columns with
few categories are one-hot encoded into the numeric block (cheap, no embedding to learn); wider
ones become an embedding index with 0 reserved for categories never seen in training.

Numeric columns are standardised, optionally after a per-column signed log (`numeric_transform`):

- "standard": (x - mean) / std, as before;
- "signed_log": sign(x) * log1p(|x|) first, then standardised. Monotone, defined for negative values
  and 0, and it compresses the long tails of amount-like columns (balances, payments) that otherwise
  squash most rows into a sliver of the standardised range;
- "auto": signed_log for the numeric columns whose training values are heavy-tailed, standard for the
  rest. Heavy-tailed = |skewness| > 2 or excess kurtosis > 7, the thresholds West, Finch & Curran (1995)
  give for substantial non-normality. On credit default this selects BILL_AMT1-6 and PAY_AMT1-6 and
  leaves LIMIT_BAL, AGE and the PAY_x codes alone;
- "quantile": each value's rank among the training values (interpolated between QUANTILE_LEVELS knots,
  tied values get the middle of their ranks), mapped through the normal quantile
  function, then standardised: any monotone shape of a column becomes roughly N(0, 1), the numeric
  encoding the tabular deep-learning literature recommends for MLPs. The knots are the site's own;
- "ple": piecewise-linear encoding (Gorishniy, Rubachev & Babenko, "On Embeddings for Numerical Features
  in Tabular Deep Learning", NeurIPS 2022, Eq. 1), by the authors' package rtdl_num_embeddings: its
  `compute_bins` cuts the column at its training quantiles at PLE_BINS + 1 levels (repeated edges merged),
  and its `PiecewiseLinearEncoding` makes x one value per bin: 1 for bins wholly below x, 0 above, its
  relative position in its own bin; below the first or above the last edge the end bins go on linearly. A
  column with T bins becomes T inputs; not standardised (the values are in [0, 1] inside the range).

  Against the hand-written code this package had before (issue 40; benchmarks/LEADERBOARD.md, "PLE from
  rtdl_num_embeddings"): the edges are the same numbers, as torch.quantile and numpy.quantile both
  interpolate linearly (largest difference on credit default's 23 columns: 0). The encoding is the
  library's linear layer, x * w + c with w = 1 / width and c = -left edge / width, rather than
  (x - left edge) / width: the two differ by rounding, at most 1.1e-15 on credit default, so an x on a
  bin edge may give about 1e-16 where the old code gave 0. The library builds that layer in torch's
  default dtype, float32, which rounds w and c (up to 5.4e-7 on credit default, and a column such as
  1e9 + a fraction would lose its bins); `_Float64Factories` has it build them in float64, as before.
  The adapter keeps by itself what the library refuses: a constant column gets one bin (v, v + 1),
  encoded 0. It differs where the library's rules do: a training table of at most PLE_BINS rows gets at
  most rows - 1 bins, as compute_bins wants fewer bins than rows (it used to get PLE_BINS bins between its
  values; two rows get one bin between them), and torch.quantile takes at most PLE_MAX_ROWS training
  rows, so a larger training table is an error asking for another numeric_transform.

The choice is fitted once, on the training table, and applied unchanged to the test table.

Missing cells (schema.json `missing`, data/schema.py MissingPolicy) are filled first: each numeric column
with its training median, mean (scikit-learn's SimpleImputer, on the site's training rows) or 0, and a 0/1
indicator input `<column>#missing` follows every column that had missing training cells. The fill values
are saved with the model, so test and scoring rows are filled as training rows were. Without missing
cells nothing changes: no indicator, the same block.

Before any transform, every numeric value is clipped to a bound derived from the column's training
(min, max), and a column constant in training is a fixed 0 input (data/checks.py says why and how far).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from vflflare.data.checks import RowChecks, clip, constant_columns
from vflflare.data.errors import VALUE
from vflflare.data.schema import NUMERIC_TRANSFORMS, MissingPolicy
from vflflare.data.table import FeatureTable
from vflflare.data.types import FeatureBlock

MAX_ONE_HOT = 16
STANDARD, SIGNED_LOG, AUTO, QUANTILE, PLE = NUMERIC_TRANSFORMS
QUANTILE_LEVELS = 1000
PLE_BINS = 16  # at most; the paper tunes 2-256 bins, 16 keeps 13 amount columns at about 200 inputs
PLE_MAX_ROWS = 2**24  # torch.quantile, behind compute_bins, refuses a longer column
QUANTILE_CLIP = 1e-7  # ranks 0 and 1 map to about +-5.2 standard deviations, not infinity
# "auto": a column is heavy-tailed above either threshold (West, Finch & Curran 1995)
HEAVY_TAIL_SKEWNESS = 2.0
HEAVY_TAIL_KURTOSIS = 7.0  # excess kurtosis (0 for a normal distribution)

FLOAT32_MAX = float(np.finfo(np.float32).max)


def signed_log(values: np.ndarray) -> np.ndarray:
    """sign(x) * log1p(|x|): monotone, odd, ~x near 0, ~log|x| in the tails."""
    return np.sign(values) * np.log1p(np.abs(values))


def quantile_knots(values: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) for v in np.quantile(values, np.linspace(0.0, 1.0, min(QUANTILE_LEVELS, len(values)))))


def to_normal_scores(values: np.ndarray, knots: tuple[float, ...]) -> np.ndarray:
    """The normal score of each value's interpolated rank among `knots` (ranks of tied knots averaged:
    interpolating up and down and taking the mean)."""
    from scipy.special import ndtri

    k = np.asarray(knots, dtype=np.float64)
    levels = np.linspace(0.0, 1.0, len(k))
    rank = 0.5 * (np.interp(values, k, levels) - np.interp(-values, -k[::-1], -levels[::-1]))
    return ndtri(np.clip(rank, QUANTILE_CLIP, 1.0 - QUANTILE_CLIP))


# A binary column has one bin, and the library warns that one bin is min-max scaling: that is what it
# should be (the end bin's linear extrapolation), as before, so the warning says nothing to act on.
warnings.filterwarnings(
    "ignore", r"The \d+-th feature has just two bin edges", UserWarning, module="rtdl_num_embeddings"
)


def ple_edges(values: np.ndarray) -> tuple[float, ...]:
    """Bin edges of a finite training column of at most PLE_MAX_ROWS values: rtdl_num_embeddings'
    compute_bins, at most PLE_BINS quantile bins (fewer where quantiles repeat, or where the column has at
    most PLE_BINS values). A constant column, which compute_bins refuses, gets one bin (v, v + 1): every
    value is clipped to v, so it is a fixed 0 input (data/checks.py)."""
    from rtdl_num_embeddings import compute_bins

    low, high = float(values.min()), float(values.max())
    if low == high:
        return (low, low + 1.0)
    bins = min(PLE_BINS, len(values) - 1)  # compute_bins wants 1 < bins < rows
    if bins < 2:  # two distinct rows: one bin between them, as the quantiles at 0 and 1 are
        return (low, high)
    # float64 in, float64 edges out; torch.quantile interpolates linearly, as numpy.quantile does
    (edges,) = compute_bins(torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)[:, None]), bins)
    return tuple(edges.tolist())


def piecewise_linear(values: np.ndarray, edges: tuple[float, ...]) -> np.ndarray:
    """(rows, bins) float64 PLE of `values` by rtdl_num_embeddings.PiecewiseLinearEncoding: inner bins in
    [0, 1], the first bin going on below its left edge and the last above its right edge (a single bin
    both ways)."""
    from rtdl_num_embeddings import PiecewiseLinearEncoding

    with _Float64Factories():
        encoding = PiecewiseLinearEncoding([torch.tensor(edges, dtype=torch.float64)])
    with torch.no_grad():
        return encoding(torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)[:, None])).numpy()


class _Float64Factories(TorchFunctionMode):
    """Inside it, torch.zeros / ones / empty without a dtype make float64 tensors, as under
    torch.set_default_dtype(torch.float64). PiecewiseLinearEncoding allocates its weights that way; the
    default dtype would do the same but is global to the process, where the sites' threads build their
    models, while a TorchFunctionMode holds for this thread only (torch's `with torch.device(...)` works so)."""

    FACTORIES = (torch.zeros, torch.ones, torch.empty)

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func in self.FACTORIES and kwargs.get("dtype") is None:
            kwargs["dtype"] = torch.float64
        return func(*args, **kwargs)


def tail_statistics(values: np.ndarray) -> tuple[float, float]:
    """(skewness, excess kurtosis) from the population moments; (0, 0) for a constant column."""
    peak = float(np.abs(values).max(initial=0.0))
    if peak > 0:  # both are scale-free: dividing by the largest |x| first keeps the moments of values near 1e308 finite
        values = values / peak
    std = float(values.std())
    if not std > 0:
        return 0.0, 0.0
    z = (values - values.mean()) / std  # standardised first: no overflow in the 4th power of large values
    return float(np.mean(z**3)), float(np.mean(z**4)) - 3.0


def is_heavy_tailed(values: np.ndarray) -> bool:
    """The "auto" rule: |skewness| > 2 or excess kurtosis > 7."""
    skewness, kurtosis = tail_statistics(values)
    return abs(skewness) > HEAVY_TAIL_SKEWNESS or kurtosis > HEAVY_TAIL_KURTOSIS


@dataclass(frozen=True)
class Preprocessor:
    """Fitted transform from a FeatureTable's columns to a FeatureBlock.

    scales: numeric column -> (mean, divisor), of the signed log for the columns in log_columns;
    one_hot / embedded: categorical column -> the training categories in sorted order (one-hot
    position, or embedding index - 1); log_columns: numeric columns signed-logged before scaling;
    quantiles: numeric column -> its training quantile knots, for columns turned into normal scores;
    ple: numeric column -> its bin edges, for columns piecewise-linearly encoded (not in scales);
    ranges: numeric column -> its training (min, max), which bound the values fed (data/checks.py); absent
    from preprocessing saved before it, which then clips nothing;
    fills: numeric column -> the value its missing cells get; indicators: the numeric columns followed by a
    0/1 missing indicator input. Both absent from preprocessing saved before missing values were filled.
    """

    columns: tuple[str, ...]
    scales: dict[str, tuple[float, float]]
    one_hot: dict[str, list[str]]
    embedded: dict[str, list[str]]
    log_columns: tuple[str, ...] = ()
    quantiles: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)  # "quantile": knots
    ple: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)  # "ple": bin edges
    ranges: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)  # training (min, max)
    fills: dict[str, float] = dataclasses.field(default_factory=dict)
    indicators: tuple[str, ...] = ()

    @classmethod
    def fit(
        cls,
        train: FeatureTable,
        max_one_hot: int = MAX_ONE_HOT,
        numeric_transform: str = STANDARD,
        missing: MissingPolicy = MissingPolicy(),
    ) -> Preprocessor:
        if numeric_transform not in NUMERIC_TRANSFORMS:
            raise ValueError(f"numeric_transform must be one of {list(NUMERIC_TRANSFORMS)}, got {numeric_transform!r}")
        scales: dict[str, tuple[float, float]] = {}
        log_columns: list[str] = []
        one_hot: dict[str, list[str]] = {}
        embedded: dict[str, list[str]] = {}
        quantiles: dict[str, tuple[float, ...]] = {}
        ple: dict[str, tuple[float, ...]] = {}
        ranges: dict[str, tuple[float, float]] = {}
        fills: dict[str, float] = {}
        indicators: list[str] = []
        for name, values in train.columns.items():
            if name in train.categorical:
                categories = sorted(set(values.tolist()))
                (one_hot if len(categories) <= max_one_hot else embedded)[name] = categories
                continue
            fills[name] = fill_value(train, name, missing.numeric)
            if np.isnan(values).any():
                values = np.where(np.isnan(values), fills[name], values)
                if missing.indicator:
                    indicators.append(name)
            ranges[name] = (float(values.min()), float(values.max()))
            if numeric_transform == PLE:  # a constant column gets one bin at its value: encoded 0
                if len(values) > PLE_MAX_ROWS:
                    raise train.csv.error(
                        f"numeric_transform ple fits its bins with torch.quantile, which takes at most "
                        f"{PLE_MAX_ROWS} rows, and the training table has {len(values)}; choose another "
                        f"numeric_transform (quantile is the nearest)",
                        column=name,
                    )
                ple[name] = ple_edges(values)
            else:
                if numeric_transform == SIGNED_LOG or (numeric_transform == AUTO and is_heavy_tailed(values)):
                    log_columns.append(name)
                    values = signed_log(values)
                elif numeric_transform == QUANTILE:
                    quantiles[name] = quantile_knots(values)
                    values = to_normal_scores(values, quantiles[name])
                with np.errstate(over="ignore", invalid="ignore"):  # checked just below (inf - inf gives NaN)
                    mean, std = float(values.mean()), float(values.std())
                if not (np.isfinite(mean) and np.isfinite(std)):  # dividing by inf would zero the column
                    row = int(np.argmax(np.abs(values)))
                    raise train.csv.error(
                        f"value {VALUE} is too large to standardise (the column's variance "
                        f"overflows float64); rescale the column or set numeric_transform: signed_log",
                        row=row,
                        column=name,
                        value=f"{train.columns[name][row]:g}",
                    )
                if ranges[name][0] == ranges[name][1]:
                    # constant: centred on its exact (transformed) value, as the rounded mean of many copies
                    # of it may differ from it, and clipping makes every later value that one: a fixed 0
                    mean, std = float(values[0]), 1.0
                scales[name] = (mean, std if std > 0 else 1.0)
        return cls(
            tuple(train.columns),
            scales,
            one_hot,
            embedded,
            tuple(log_columns),
            quantiles,
            ple,
            ranges,
            fills,
            tuple(indicators),
        )

    @property
    def constant_columns(self) -> list[str]:
        """Numeric columns with one value in every training row: fed as a fixed 0."""
        return constant_columns(self.ranges)

    def checked_transform(self, table: FeatureTable) -> tuple[FeatureBlock, dict[str, Any]]:
        """`transform(table, release=True)` and data/checks.py's report of `table`'s rows against the training
        rows, gathered in the same pass: each column is read once (a Parquet column is read while used)."""
        checks = RowChecks(table, self.ranges, {**self.one_hot, **self.embedded})
        return self.transform(table, release=True, inspect=checks.column), checks.result()

    def values(self, table: FeatureTable, name: str) -> np.ndarray:
        """A numeric column of `table`, missing cells filled, clipped to its training bound (data/checks.py),
        as it is transformed."""
        values = table.columns[name]
        if name in self.fills and np.isnan(values).any():
            values = np.where(np.isnan(values), self.fills[name], values)
        return clip(values, *self.ranges[name]) if name in self.ranges else values

    @property
    def numeric_names(self) -> list[str]:
        names: list[str] = []
        for name in self.columns:
            if name in self.scales:
                names.append(name)
            elif name in self.ple:
                names.extend(f"{name}#bin{t}" for t in range(len(self.ple[name]) - 1))
            elif name in self.one_hot:
                names.extend(f"{name}={category}" for category in self.one_hot[name])
            if name in self.indicators:
                names.append(f"{name}#missing")
        return names

    @property
    def categorical_names(self) -> list[str]:
        return [name for name in self.columns if name in self.embedded]

    @property
    def feature_names(self) -> list[str]:
        """Numeric-block column names, then categorical-block column names."""
        return self.numeric_names + self.categorical_names

    def transform(
        self, table: FeatureTable, release: bool = False, inspect: Callable[[str, np.ndarray], None] | None = None
    ) -> FeatureBlock:
        """The float32 block of `table`. release: drop each of `table`'s columns once transformed, for a
        caller that has no further use for them, so a large table's float64 columns go one by one while
        the block fills. inspect(name, values): shown each column as read, before it is transformed."""
        if set(table.columns) != set(self.columns):
            raise ValueError(f"columns {sorted(table.columns)} differ from the fitted {sorted(self.columns)}")
        rows = len(table.ids)
        # Row-major, as the models read rows, and filled in place: a table whose columns are read one at a
        # time (Parquet) then holds this block and one column, never a second copy of the block.
        numeric = np.empty((rows, len(self.numeric_names)), dtype=np.float32)
        fill = _RowMajorFill(numeric)
        for name in self.columns:
            if inspect is not None:
                inspect(name, table.columns[name])
            missing = np.isnan(table.columns[name]) if name in self.indicators else None
            if name in self.scales:
                fill.add(self._scaled(table, name))  # float64 -> float32, as astype would round
            elif name in self.one_hot or name in self.ple:
                fill.add(
                    self._piecewise(table, name)
                    if name in self.ple
                    else self._one_hot(table.columns[name], self.one_hot[name])
                )
            if missing is not None:
                fill.add(missing)
            if release and name not in self.embedded:
                table.release(name)
        fill.flush()
        categorical: list[np.ndarray] = []
        for name in self.categorical_names:
            index = {category: i + 1 for i, category in enumerate(self.embedded[name])}
            categorical.append(np.array([index.get(value, 0) for value in table.columns[name]], dtype=np.int64))
            if release:
                table.release(name)
        return FeatureBlock(
            numeric=numeric,
            categorical=np.stack(categorical, axis=1) if categorical else np.zeros((rows, 0), np.int64),
            cardinalities=[len(self.embedded[name]) + 1 for name in self.categorical_names],
        )

    def _scaled(self, table: FeatureTable, name: str) -> np.ndarray:
        """float64 (x - mean) / divisor of a numeric column (signed-logged first if chosen); a value that
        float32 cannot hold is an error naming its row."""
        values = self.values(table, name)
        mean, divisor = self.scales[name]
        if name in self.log_columns:
            values = signed_log(values)
        elif name in self.quantiles:
            values = to_normal_scores(values, self.quantiles[name])
        with np.errstate(over="ignore"):  # an overflow gives inf, refused just below
            scaled = (values - mean) / divisor
        beyond = np.flatnonzero(np.abs(scaled) > FLOAT32_MAX)
        if len(beyond):  # would become inf in float32, then NaN in training or scoring
            row = int(beyond[0])
            # inf when the difference itself overflowed: say so in words rather than "inf"
            distance = f"{abs(scaled[row]):.3g}" if np.isfinite(scaled[row]) else "more than 1.8e+308"
            raise table.csv.error(
                f"value {VALUE} is {distance} standard deviations from the "
                f"training mean, beyond float32; check the value or set numeric_transform: signed_log",
                row=row,
                column=name,
                value=f"{table.columns[name][row]:g}",
            )
        return scaled

    def _piecewise(self, table: FeatureTable, name: str) -> np.ndarray:
        """PLE of a numeric column; a value whose end bin float32 cannot hold is an error naming its row."""
        block = piecewise_linear(self.values(table, name), self.ple[name])
        beyond = np.flatnonzero(~(np.abs(block) <= FLOAT32_MAX).all(axis=1))  # NaN too (inf * 0 in x * w + c)
        if len(beyond):
            row = int(beyond[0])
            raise table.csv.error(
                f"value {VALUE} is too far beyond the training range "
                f"for float32; check the value or set numeric_transform: signed_log",
                row=row,
                column=name,
                value=f"{table.columns[name][row]:g}",
            )
        return block

    @staticmethod
    def _one_hot(values: np.ndarray, categories: list[str]) -> np.ndarray:
        """One column per training category; an unseen category is all zeros."""
        position = {category: i for i, category in enumerate(categories)}
        block = np.zeros((len(values), len(position)))
        for row, value in enumerate(values):
            if value in position:
                block[row, position[value]] = 1.0
        return block


class _RowMajorFill:
    """Fills a row-major float32 block from left to right, a few columns at a time: one column written into a
    row-major block touches every row's cache line, so columns are gathered (as float32, rounded as astype
    rounds) into a small column-major stage and copied over together, TILE rows at a time, so that the rows
    being written stay in cache while every staged column lands in them. At 665,000 rows x 50 staging took a
    third of the time of writing columns one by one; at 100,000 x 1500, tiles of up to 64 staged columns take
    0.4 s where untiled groups of 8 took 1.2 s. The stage holds at most STAGE_BYTES, and at least 8 columns (the
    old stage: a tall table's stage is no larger than before, since the memory goal counts it)."""

    TILE = 1024
    STAGE_BYTES = 16 << 20

    def __init__(self, block: np.ndarray) -> None:
        self.block, self.start, self.used = block, 0, 0
        group = int(np.clip(self.STAGE_BYTES // (4 * max(1, block.shape[0])), 8, 64))
        self.stage = np.empty((min(group, max(1, block.shape[1])), block.shape[0]), dtype=np.float32)

    def add(self, values: np.ndarray) -> None:
        """The next column (1-D) or columns (rows x k)."""
        columns = values[None, :] if values.ndim == 1 else values.T
        if self.used + len(columns) > len(self.stage):
            self.flush()
        if len(columns) > len(self.stage):  # wider than the stage (a one-hot column of many levels)
            self.block[:, self.start : self.start + len(columns)] = values if values.ndim == 2 else values[:, None]
            self.start += len(columns)
            return
        self.stage[self.used : self.used + len(columns)] = columns
        self.used += len(columns)

    def flush(self) -> None:
        end = self.start + self.used
        for row in range(0, self.block.shape[0], self.TILE):
            self.block[row : row + self.TILE, self.start : end] = self.stage[: self.used, row : row + self.TILE].T
        self.start, self.used = end, 0


def fill_value(train: FeatureTable, name: str, strategy: str) -> float:
    """What a numeric column's missing cells become: its training median or mean (SimpleImputer), or 0.
    A column with no value in any training row has nothing to learn a fill from: an error naming it."""
    values = train.columns[name]
    if strategy in ("zero", "error"):
        return 0.0
    missing = np.isnan(values)
    if strategy == "median" and not missing.any():  # SimpleImputer's number, without its masked-array sort
        with np.errstate(over="ignore"):
            fill = float(np.median(values))
        return fill if np.isfinite(fill) else float(np.percentile(values, 50, method="lower"))
    from sklearn.impute import SimpleImputer

    if missing.all():
        raise train.csv.error(
            'every training row is missing this column; drop it or set schema.json \'missing\': {"numeric": "zero"}',
            column=name,
        )
    with np.errstate(over="ignore", invalid="ignore"):  # values near float64's limit: handled just below
        fill = float(SimpleImputer(strategy=strategy).fit(values.reshape(-1, 1)).statistics_[0])
    # the mean (or the middle of two values) can overflow; the lower median is a training value
    return fill if np.isfinite(fill) else float(np.nanpercentile(values, 50, method="lower"))


@dataclass
class SiteInput:
    """What a site needs to turn new rows of its table into f_k's input as at training time: kept with
    its saved model (protocol/model_store.py)."""

    id_column: str
    categorical_columns: list[str]
    id_normalize: list[str]
    preprocessor: Preprocessor
    missing: MissingPolicy = MissingPolicy()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id_column": self.id_column,
            "categorical_columns": self.categorical_columns,
            "id_normalize": self.id_normalize,
            "preprocessor": dataclasses.asdict(self.preprocessor),
            "missing": self.missing.to_dict(),
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SiteInput:
        p = values["preprocessor"]
        preprocessor = Preprocessor(
            tuple(p["columns"]),
            {k: tuple(v) for k, v in p["scales"].items()},
            p["one_hot"],
            p["embedded"],
            tuple(p["log_columns"]),
            {k: tuple(v) for k, v in p.get("quantiles", {}).items()},  # absent before quantile
            {k: tuple(v) for k, v in p.get("ple", {}).items()},
            {k: tuple(v) for k, v in p.get("ranges", {}).items()},  # absent before clipping
            p.get("fills", {}),
            tuple(p.get("indicators", ())),
        )
        # a model saved before missing cells could be filled has no fill values: they stay errors for it
        missing = MissingPolicy(**values["missing"]) if "missing" in values else MissingPolicy("error", "error", False)
        return cls(
            values["id_column"],
            list(values["categorical_columns"]),
            list(values["id_normalize"]),
            preprocessor,
            missing,
        )
