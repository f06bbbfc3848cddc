"""exactbatch: exact, reproducible minibatches for training loops."""

from exactbatch.certificate import Certificate, certify
from exactbatch.dataset import Dataset
from exactbatch.errors import (
    ConvergenceWarning,
    ExactnessError,
    MixingWarning,
    NdfError,
    TotalSizeWarning,
)
from exactbatch.kernels import backend
from exactbatch.loader import DataLoader
from exactbatch.ndf import (
    NdfDataset,
    NdfFile,
    open_ndf,
    open_ndf_dataset,
    save_ndf,
    save_ndf_dataset,
)
from exactbatch.ndf.categories import categories
from exactbatch.sources.arrow_ipc import arrow_file
from exactbatch.sources.arrow_table import arrow_source
from exactbatch.sources.blocks import ndf_blocks
from exactbatch.sources.duckdb_relations import duckdb_source
from exactbatch.sources.hf_datasets import hf_source
from exactbatch.sources.parquet import ParquetSource, parquet_source
from exactbatch.sources.polars_frames import polars_source
from exactbatch.sources.splitting import kfold, split
from exactbatch.transform import Standardize

__all__ = [
    "Certificate",
    "ConvergenceWarning",
    "DataLoader",
    "Dataset",
    "ExactnessError",
    "MixingWarning",
    "NdfDataset",
    "NdfError",
    "NdfFile",
    "ParquetSource",
    "Standardize",
    "TotalSizeWarning",
    "arrow_file",
    "arrow_source",
    "backend",
    "categories",
    "certify",
    "duckdb_source",
    "hf_source",
    "kfold",
    "ndf_blocks",
    "open_ndf",
    "open_ndf_dataset",
    "parquet_source",
    "polars_source",
    "save_ndf",
    "save_ndf_dataset",
    "split",
]

__version__ = "0.1.0.dev0"
