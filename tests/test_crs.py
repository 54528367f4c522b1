"""lattice.io.crs: GeoTIFF keys and WKT1/WKT2 parsed without pyproj, on hand-built records and
on every aerial file of ../shared/data (the CRS SOURCES.md lists for each)."""

from __future__ import annotations

import struct

import pytest
from cli_helpers import data_file
from hypothesis import given, settings
from hypothesis import strategies as st

from lattice.io import read_points
from lattice.io.crs import CRS, CRSError, crs_from_records, parse_geokeys, parse_wkt

P = "LASF_Projection"


def geokeys(keys, n: int | None = None) -> bytes:
    """A GeoKeyDirectory record: header (1, 1, 0, n) then (id, location, count, value) per key."""
    n = len(keys) if n is None else n
    return struct.pack(f"<{4 + 4 * len(keys)}H", 1, 1, 0, n, *(v for k in keys for v in k))


def ascii_params(*parts: str) -> tuple[bytes, list[tuple[int, int]]]:
    """GeoAsciiParams holding ``parts`` (each ``|``-terminated) and each part's (offset, count)."""
    out, spans = b"", []
    for p in parts:
        spans.append((len(out), len(p) + 1))
        out += p.encode() + b"|"
    return out + b"\0", spans


# ---- GeoTIFF keys ----------------------------------------------------------------------


def test_projected_geokeys_with_citation():
    text, [(o, c)] = ascii_params("WGS 84 / UTM zone 42N")
    d = geokeys([(1024, 0, 1, 1), (1026, 34737, c, o), (3072, 0, 1, 32642), (3076, 0, 1, 9001)])
    crs = parse_geokeys(d, None, text)
    assert crs == CRS("WGS 84 / UTM zone 42N", 32642, None, "geotiff", units="metre")


def test_geographic_geokeys():
    text, [(o, c)] = ascii_params("NAD83")
    d = geokeys([(1024, 0, 1, 2), (2048, 0, 1, 4269), (2049, 34737, c, o), (2054, 0, 1, 9102)])
    crs = parse_geokeys(d, None, text)
    assert (crs.name, crs.epsg, crs.geographic_epsg, crs.units) == ("NAD83", 4269, 4269, "degree")


def test_user_defined_codes_are_no_code_and_esri_citations_are_cleaned():
    text, [(o, c)] = ascii_params("PCS Name = NAD_1983_HARN_Lambert|GCS Name = GCS_NAD83")
    d = geokeys(
        [(1024, 0, 1, 1), (2048, 0, 1, 32767), (3072, 0, 1, 32767), (3073, 34737, c, o), (3076, 0, 1, 9002)]
    )
    crs = parse_geokeys(d, b"", text)
    assert (crs.name, crs.epsg, crs.geographic_epsg, crs.units) == (
        "NAD_1983_HARN_Lambert",
        None,
        None,
        "foot",
    )


def test_projected_key_wins_over_geographic_and_vertical_is_kept():
    """As in PDAL's mvk-thin.las: a projected CRS on a geographic base (the base code is kept)."""
    text, [(o, c)] = ascii_params("unknown")
    d = geokeys(
        [(1024, 0, 1, 1), (1026, 34737, c, o), (2048, 0, 1, 4269), (3072, 0, 1, 26995), (4096, 0, 1, 5703)]
    )
    crs = parse_geokeys(d, None, text)
    assert (crs.name, crs.epsg, crs.geographic_epsg, crs.vertical_epsg) == (None, 26995, 4269, 5703)


def test_geokey_values_in_the_double_and_directory_records_are_read():
    doubles = struct.pack("<3d", 1.5, 2.5, 3.5)
    keys = [(3072, 0, 1, 2154), (3076, 34736, 1, 2), (4096, 34735, 1, 16)]
    d = geokeys(keys) + struct.pack("<H", 5703)  # 4096's value: the directory's short 16, after the keys
    crs = parse_geokeys(d, doubles, None)
    assert (crs.epsg, crs.vertical_epsg, crs.units) == (2154, 5703, None)  # a unit of 3.5 is no unit code


@pytest.mark.parametrize(
    ("directory", "doubles", "text", "match"),
    [
        (b"", None, None, "has 0 bytes"),
        (b"\x01\x00\x01\x00\x00", None, None, "has 5 bytes"),
        (geokeys([(3072, 0, 1, 2154)], n=5), None, None, "declares 5 keys but its 16 bytes hold 1"),
        (geokeys([]), None, None, "holds no keys"),
        (
            geokeys([(1026, 34737, 40, 0)]),
            None,
            b"short|\0",
            r"ASCII bytes \[0, 40\) but GeoAsciiParams has 7",
        ),
        (geokeys([(1026, 34737, 5, 0)]), None, None, "no such record"),
        (geokeys([(3072, 34736, 1, 9)]), b"\0" * 8, None, r"doubles \[9, 10\) but GeoDoubleParams has 1"),
        (geokeys([(3072, 999, 1, 0)]), None, None, "unknown TIFFTagLocation 999"),
    ],
)
def test_malformed_geokeys_are_one_line_errors(directory, doubles, text, match):
    with pytest.raises(CRSError, match=match) as err:
        parse_geokeys(directory, doubles, text)
    assert "\n" not in str(err.value)


# ---- WKT -------------------------------------------------------------------------------

WKT1 = (
    'PROJCS["WGS 84 / UTM zone 42N",GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,'
    '298.257223563,AUTHORITY["EPSG","7030"]],AUTHORITY["EPSG","6326"]],PRIMEM["Greenwich",0],'
    'UNIT["degree",0.0174532925199433],AUTHORITY["EPSG","4326"]],PROJECTION["Transverse_Mercator"],'
    'PARAMETER["central_meridian",69],UNIT["metre",1,AUTHORITY["EPSG","9001"]],AXIS["Easting",EAST],'
    'AUTHORITY["EPSG","32642"]]'
)
WKT2 = (
    'PROJCRS["RGF93 v1 / Lambert-93",BASEGEOGCRS["RGF93 v1",DATUM["Reseau Geodesique Francais 1993 v1",'
    'ELLIPSOID["GRS 1980",6378137,298.257222101,LENGTHUNIT["metre",1]]],ID["EPSG",4171]],'
    'CONVERSION["Lambert-93",METHOD["Lambert Conic Conformal (2SP)",ID["EPSG",9802]]],'
    'CS[Cartesian,2],AXIS["easting (X)",east,ORDER[1],LENGTHUNIT["metre",1]],'
    'AXIS["northing (Y)",north,ORDER[2],LENGTHUNIT["metre",1]],USAGE[SCOPE["mapping"],'
    'AREA["France"],BBOX[41.15,-9.86,51.56,10.38]],ID["EPSG",2154]]'
)


def test_wkt1_projected():
    crs = parse_wkt(WKT1.encode() + b"\0")
    assert (crs.name, crs.epsg, crs.geographic_epsg, crs.units, crs.source) == (
        "WGS 84 / UTM zone 42N",
        32642,
        4326,
        "metre",
        "wkt",
    )
    assert crs.wkt == WKT1


def test_wkt2_projected_units_from_the_axes():
    crs = parse_wkt(WKT2)
    assert (crs.name, crs.epsg, crs.geographic_epsg, crs.units) == (
        "RGF93 v1 / Lambert-93",
        2154,
        4171,
        "metre",
    )


def test_wkt_without_a_root_authority_has_no_code():
    """Autzen's WKT: codes only inside (spheroid, datum, unit), none at the root."""
    text = 'PROJCS["NAD_1983_HARN_Lambert",GEOGCS["GCS",DATUM["D",SPHEROID["S",1,2,AUTHORITY["EPSG","7019"]]]],UNIT["foot",0.3048,AUTHORITY["EPSG","9002"]]]'
    crs = parse_wkt(text)
    assert (crs.name, crs.epsg, crs.units) == ("NAD_1983_HARN_Lambert", None, "foot")


def test_geographic_compound_bound_and_parenthesised_wkt():
    geog = parse_wkt(
        'GEOGCRS["WGS 84",DATUM["World Geodetic System 1984"],ANGLEUNIT["degree",0.01745],ID["EPSG",4326]]'
    )
    assert (geog.name, geog.epsg, geog.geographic_epsg, geog.units) == ("WGS 84", 4326, 4326, "degree")
    compound = parse_wkt(
        f'COMPD_CS["UTM 42N + EGM96",{WKT1},VERT_CS["EGM96 height",VERT_DATUM["EGM96",2005],'
        'UNIT["metre",1],AUTHORITY["EPSG","5773"]]]'
    )
    assert (compound.name, compound.epsg, compound.vertical_epsg, compound.units) == (
        "UTM 42N + EGM96",
        None,
        5773,
        "metre",
    )
    wkt2 = parse_wkt(
        'COMPOUNDCRS["A + B",GEOGCRS["A",ID["EPSG",4269]],VERTCRS["B",ID["EPSG",5703]],ID["EPSG",5498]]'
    )
    assert (wkt2.epsg, wkt2.geographic_epsg, wkt2.vertical_epsg) == (5498, 4269, 5703)
    bound = parse_wkt(f'BOUNDCRS[SOURCECRS[{WKT2}],TARGETCRS[GEOGCRS["WGS 84"]],ABRIDGEDTRANSFORMATION["x"]]')
    assert (bound.name, bound.epsg) == ("RGF93 v1 / Lambert-93", 2154)
    paren = parse_wkt('GEOGCS("NAD83",DATUM("North_American_Datum_1983"),AUTHORITY("EPSG","4269"))')
    assert (paren.name, paren.epsg) == ("NAD83", 4269)
    quoted = parse_wkt('PROJCRS["the ""quoted"" one",ID["EPSG",1234]]')
    assert quoted.name == 'the "quoted" one'


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "not WKT text"),
        ("''", "not WKT text: \"''\""),
        ('PROJCS["x",GEOGCS["y"]', "never closed"),
        ('PROJCS["x"]]', "text after the root"),
        ('PROJCS["x")', "opened with \\[ but closed with \\)"),
        ('DATUM["WGS_1984"]', "root is DATUM, not a coordinate reference system"),
        ('PROJCS["x]', "unexpected character '\"' at offset 7"),
    ],
)
def test_malformed_wkt_is_a_one_line_error(text, match):
    with pytest.raises(CRSError, match=match):
        parse_wkt(text)


# ---- a file's records ------------------------------------------------------------------


def test_records_prefer_wkt_and_report_what_failed():
    text, [(o, c)] = ascii_params("from the keys")
    keys = geokeys([(1026, 34737, c, o), (3072, 0, 1, 2903)])
    crs, err = crs_from_records([(P, 34735, keys), (P, 34737, text), (P, 2112, WKT1.encode())])
    assert (crs.source, crs.epsg, err) == ("wkt", 32642, None)
    crs, err = crs_from_records([(P, 34735, keys), (P, 34737, text), (P, 2112, b'PROJCS["broken"')])
    assert (crs.source, crs.name, crs.epsg) == ("geotiff", "from the keys", 2903)
    assert err.startswith("WKT record (LASF_Projection 2112): WKT: unbalanced brackets")
    crs, err = crs_from_records([(P, 34735, b"\x01\x00")])
    assert (
        crs is None
        and err
        == "GeoKeyDirectory (LASF_Projection 34735): GeoKeyDirectory has 2 bytes; it needs a header of 8 and whole uint16s"
    )
    assert crs_from_records([("liblas", 2112, WKT1.encode()), ("other", 34735, b"")]) == (None, None)


def test_crs_json_round_trip():
    crs = parse_wkt(WKT2)
    assert CRS.from_json(crs.to_json()) == crs
    with pytest.raises(ValueError, match="source must be"):
        CRS("x", None, None, "proj4")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.binary(max_size=40), st.binary(max_size=40), st.binary(max_size=60))
def test_records_never_raise(directory, doubles, text, wkt):
    crs, err = crs_from_records(
        [(P, 34735, directory), (P, 34736, doubles), (P, 34737, text), (P, 2112, wkt)]
    )
    assert crs is None or isinstance(crs, CRS)
    assert err is None or (isinstance(err, str) and "\n" not in err)


# ---- real files (SOURCES.md) -----------------------------------------------------------

LA93 = ("RGF93 v1 / Lambert-93", 2154, "wkt")
REAL_CRS = [
    ("autzen_trim.las", ("NAD_1983_HARN_Lambert_Conformal_Conic", None, "wkt")),
    ("simple.las", None),
    ("ign_lidarhd/Semis_2022_0906_6665_LA93_IGN69_ok.laz", LA93),
    ("ign_lidarhd/las_with_several_extra_byte_bloc.laz", ("RGF93 / Lambert-93", 2154, "wkt")),
    ("ign_lidarhd/test_data_77050_627755_LA93_IGN69.laz", LA93),
    ("ign_lidarhd/test_data_77050_627760_LA93_IGN69.laz", LA93),
    ("ign_lidarhd/test_data_77055_627755_LA93_IGN69.laz", LA93),
    ("ign_lidarhd/test_data_77055_627760_LA93_IGN69.laz", LA93),
    ("ign_lidarhd/test_data_77060_627755_LA93_IGN69.laz", LA93),
    ("ign_lidarhd/test_data_77060_627760_LA93_IGN69.laz", LA93),
    ("ign_lidarhd/test_semis_2021_0382_6565_LA93_IGN69_cropped.laz", LA93),
    ("ign_lidarhd/St_Barth_RGAF09_UTM20N_IGN_1988_SB_subset_100m.laz", None),
    ("pdal_extra/4_6_crop.las", (None, 2903, "geotiff")),
    ("pdal_extra/hexbin-crop.las", ("WGS 84 / UTM zone 42N", 32642, "wkt")),
    ("pdal_extra/mvk-thin.las", ("NAD_1983_StatePlane_Mississippi_West_FIPS_2302_Feet", 26995, "geotiff")),
    ("pdal_extra/sample_c.las", None),
    ("pdal_extra/warsaw_small.las", None),
]


@pytest.mark.parametrize(("rel", "expected"), REAL_CRS, ids=[r[0].split("/")[-1][:24] for r in REAL_CRS])
def test_real_file_crs(rel, expected):
    meta = read_points(data_file(f"aerial_lidar/{rel}")).metadata
    crs = meta["crs"]
    assert (None if crs is None else (crs["name"], crs["epsg"], crs["source"])) == expected
    if rel.endswith("warsaw_small.las"):  # its WKT record holds the two characters ''
        assert meta["crs_error"] == "WKT record (LASF_Projection 2112): not WKT text: \"''\""
    else:
        assert "crs_error" not in meta


def test_real_file_crs_details():
    autzen = read_points(data_file("aerial_lidar/autzen_trim.las")).metadata["crs"]
    assert autzen["units"] == "foot" and autzen["wkt"].startswith(
        'PROJCS["NAD_1983_HARN_Lambert_Conformal_Conic"'
    )
    mvk = read_points(data_file("aerial_lidar/pdal_extra/mvk-thin.las")).metadata["crs"]
    assert (mvk["geographic_epsg"], mvk["units"]) == (4269, "US survey foot")  # GeographicTypeGeoKey 2048
    crop = read_points(data_file("aerial_lidar/pdal_extra/4_6_crop.las")).metadata["crs"]
    assert (crop["vertical_epsg"], crop["units"]) == (5103, "US survey foot")
