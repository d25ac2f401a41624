"""Everything the stages share and nothing that runs: table schemas, conf loading, errors and
dataset references. Imports nothing of the package."""
