"""The execution both front doors share: a response as a chain of pieces, the one piece loop
that runs it, replica health and stalls, move settings and the ``auto`` cost profile.
"""
