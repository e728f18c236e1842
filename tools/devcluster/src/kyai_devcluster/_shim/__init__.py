"""A directory for ``PYTHONPATH``: its ``sitecustomize`` resolves devcluster Service names.

Not imported as a package: :func:`kyai_devcluster.network_env` puts this directory on
``PYTHONPATH``, so every Python process started with that environment imports
``sitecustomize`` at start-up.
"""
