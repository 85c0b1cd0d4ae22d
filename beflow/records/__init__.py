"""Run records: what each run leaves in ``.beflow/runs/``, and reading them back."""
