"""What the throwaway servers share: ``with`` starts one and cleans it up, whatever happened."""

from __future__ import annotations

from typing import Self

__all__ = ["Throwaway"]


class Throwaway:
    """A throwaway server: :meth:`start` brings it up, :meth:`cleanup` stops it and removes it."""

    def start(self) -> None:
        """Bring the server up."""
        raise NotImplementedError

    def cleanup(self) -> None:
        """Stop the server if it runs and remove what it wrote."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()
