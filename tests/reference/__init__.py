"""Independent references for the tests: slow loops written from the definitions (definitions.py)
and transcriptions of published code (one file each, citing repository, commit and file)."""

from reference.definitions import IGNORE, classes_of, ref_loss, ref_place_weight, ref_places_row
from reference.number_tokens import ref_number_loss, ref_slots_row

__all__ = ["IGNORE", "classes_of", "ref_loss", "ref_place_weight", "ref_places_row", "ref_number_loss", "ref_slots_row"]
