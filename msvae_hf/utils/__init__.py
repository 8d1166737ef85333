"""What the commands share: the run folder's layout, locks and atomic writes (``run_folder``) and the process's
settings and provenance (``runtime``)."""
