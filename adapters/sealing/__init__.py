"""The `Sealer` port: reasoning sealed for stateless clients."""

from adapters.sealing.aesgcm import AesGcmSealer

__all__ = ["AesGcmSealer"]
