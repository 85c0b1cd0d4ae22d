"""Code hosts: where runs' branches are pushed and proposed (:class:`~beflow.codehosts.base.CodeHost`); the one
the config names is opened by :func:`beflow.app.open_code_host`."""
