"""Analysis: from saved records and samples to tails with confidence intervals, tables and figures.
Analysis reads only saved run files, so a report can be rebuilt from them (`flatshare report DIR`)."""
