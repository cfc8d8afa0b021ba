"""Vocabulary of the catalogue generator: product types, attributes, options, brands.

Written for this project (no third-party data).  Every product type names a real product
noun, a breadcrumb of at least three `` › ``-separated levels, a pool of multi-word
attributes, the option groups a product of that type can offer, and a price range.  Attribute
phrases inside one type are chosen so that no phrase's token set is a subset of another's
(otherwise fuzzy token-set matching would make near-miss products indistinguishable);
``tests/test_webshop_generator.py`` checks that.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BRANDS", "CATEGORIES", "OPTION_POOLS", "PRODUCT_TYPES", "ProductType"]


@dataclass(frozen=True)
class ProductType:
    """One kind of product the generator can make.

    Attributes:
        category: Upstream top-level category (``beauty``, ``food``, ``fashion``,
            ``furniture``, ``electronics``).
        query: The search query the product was "scraped" with (upstream's ``query``).
        noun: Head noun phrase used in titles (title case), e.g. ``"Running Shoes"``.
        phrase: Lower-case phrase used in instructions, e.g. ``"running shoes"``.
        crumbs: Breadcrumb levels, joined with `` › `` into ``product_category``.
        attributes: Attribute pool (multi-word phrases).
        options: Option groups as (option name, pool name) pairs.
        price: (low, high) dollar range of the base price.
        audiences: Optional "for ..." title suffixes.
    """

    category: str
    query: str
    noun: str
    phrase: str
    crumbs: tuple[str, ...]
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    price: tuple[float, float]
    audiences: tuple[str, ...] = ()


def _t(category: str, query: str, noun: str, crumbs: str, attributes: str, options: str,
       price: tuple[float, float], audiences: str = "") -> ProductType:
    return ProductType(
        category=category,
        query=query,
        noun=noun,
        phrase=noun.lower(),
        crumbs=tuple(c.strip() for c in crumbs.split(">")),
        attributes=tuple(a.strip() for a in attributes.split(",")),
        options=tuple(tuple(o.split("=")) for o in options.split()) if options else (),  # type: ignore[misc]
        price=price,
        audiences=tuple(a.strip() for a in audiences.split(",") if a.strip()),
    )


#: Option value pools (values as a shop would show them; the loader lower-cases them).
OPTION_POOLS: dict[str, tuple[str, ...]] = {
    "color": ("Black", "White", "Navy", "Grey", "Red", "Beige", "Green", "Pink", "Brown",
              "Purple", "Yellow", "Orange", "Teal", "Burgundy", "Ivory", "Khaki"),
    "apparel_size": ("Small", "Medium", "Large", "X-Large", "XX-Large", "X-Small"),
    "shoe_size": ("6", "7", "8", "9", "10", "11", "12", "13"),
    "scent": ("Lavender", "Citrus", "Unscented", "Vanilla Bean", "Coconut", "Eucalyptus Mint",
              "Sandalwood", "Fresh Cotton"),
    "flavor": ("Chocolate", "Sea Salt", "Strawberry", "Peanut Butter", "Original", "Honey",
               "Cinnamon", "Blueberry", "Jalapeno", "Maple"),
    "pack": ("1 Pack", "2 Pack", "4 Pack", "6 Pack", "12 Pack"),
    "volume": ("1.7 Fl Oz", "3.4 Fl Oz", "8 Fl Oz", "16 Fl Oz", "32 Fl Oz"),
    "weight": ("8 Ounce", "16 Ounce", "32 Ounce", "5 Pound", "10 Pound"),
    "capacity": ("32GB", "64GB", "128GB", "256GB", "512GB"),
    "length": ("3 Feet", "6 Feet", "10 Feet", "15 Feet"),
    "finish": ("Walnut", "Oak", "Espresso", "Cherry", "Rustic Grey", "Matte Black", "Natural Pine"),
    "furniture_size": ("24 Inch", "30 Inch", "36 Inch", "42 Inch", "48 Inch"),
    "bed_size": ("Twin", "Full", "Queen", "King", "California King"),
    "style": ("Modern", "Traditional", "Farmhouse", "Industrial", "Mid Century"),
    "fit": ("Regular", "Slim", "Relaxed", "Big & Tall"),
    "shade": ("Fair", "Light Medium", "Tan Deep", "Espresso Brown", "Porcelain"),
    "model": ("Standard", "Pro", "Max", "Lite"),
}

BEAUTY, FOOD, FASHION, FURNITURE, ELECTRONICS = (
    "beauty", "food", "fashion", "furniture", "electronics")
CATEGORIES: tuple[str, ...] = (BEAUTY, FOOD, FASHION, FURNITURE, ELECTRONICS)

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # ---------------------------------------------------------------- beauty
    _t(BEAUTY, "deodorant", "Deodorant",
       "Beauty & Personal Care > Personal Care > Deodorants & Antiperspirants > Deodorants",
       "aluminum free, long lasting, sensitive skin, natural ingredients, paraben free, "
       "cruelty free, baking soda, travel size", "scent=scent pack=pack", (6, 24), "Women,Men"),
    _t(BEAUTY, "shampoo", "Shampoo",
       "Beauty & Personal Care > Hair Care > Shampoo & Conditioner > Shampoos",
       "sulfate free, hair growth, dry hair, tea tree, color treated, argan oil, "
       "dandruff relief, salon quality", "scent=scent volume=volume", (8, 35)),
    _t(BEAUTY, "conditioner", "Conditioner",
       "Beauty & Personal Care > Hair Care > Shampoo & Conditioner > Conditioners",
       "sulfate free, curly hair, damaged hair, coconut oil, silicone free, "
       "deep moisture, frizz control, keratin treatment", "scent=scent volume=volume", (8, 32)),
    _t(BEAUTY, "face moisturizer", "Face Moisturizer",
       "Beauty & Personal Care > Skin Care > Face > Creams & Moisturizers",
       "hyaluronic acid, anti aging, oil free, fine lines, dry skin, spf protection, "
       "vitamin c, fragrance free", "volume=volume", (12, 60)),
    _t(BEAUTY, "body scrub", "Body Scrub",
       "Beauty & Personal Care > Skin Care > Body > Scrubs & Body Treatments",
       "dead skin, exfoliating sugar, coffee grounds, shea butter, natural ingredients, "
       "cellulite reduction, gentle formula, sea salt", "scent=scent weight=weight", (9, 30)),
    _t(BEAUTY, "lip balm", "Lip Balm",
       "Beauty & Personal Care > Skin Care > Lip Care > Balms & Moisturizers",
       "beeswax formula, chapped lips, spf protection, tinted color, vegan friendly, "
       "long lasting, paraben free, travel size", "flavor=flavor pack=pack", (3, 15)),
    _t(BEAUTY, "eyeshadow palette", "Eyeshadow Palette",
       "Beauty & Personal Care > Makeup > Eyes > Eyeshadow",
       "highly pigmented, cruelty free, long lasting, shimmer finish, matte shades, "
       "easy blend, travel size, talc free", "shade=shade", (10, 55)),
    _t(BEAUTY, "nail polish", "Nail Polish",
       "Beauty & Personal Care > Foot, Hand & Nail Care > Nail Art & Polish > Nail Polish",
       "quick dry, chip resistant, non toxic, gel finish, high shine, vegan friendly, "
       "long wear, glitter effect", "color=color pack=pack", (5, 22)),
    _t(BEAUTY, "hair dryer", "Hair Dryer",
       "Beauty & Personal Care > Hair Care > Styling Tools & Appliances > Hair Dryers",
       "ionic technology, low noise, fast drying, diffuser attachment, ceramic tourmaline, "
       "salon quality, lightweight design, cool shot", "color=color", (25, 120)),
    _t(BEAUTY, "electric toothbrush", "Electric Toothbrush",
       "Beauty & Personal Care > Oral Care > Toothbrushes & Accessories > Electric Toothbrushes",
       "rechargeable battery, pressure sensor, travel case, sensitive teeth, smart timer, "
       "replacement heads, deep clean, whitening mode", "color=color", (20, 150)),
    _t(BEAUTY, "scented candle", "Scented Candle",
       "Beauty & Personal Care > Fragrance > Home Fragrance > Candles",
       "soy wax, lead free, cotton wick, long burning, essential oils, glass jar, "
       "gift set, clean burning", "scent=scent", (10, 45)),
    _t(BEAUTY, "makeup brush set", "Makeup Brush Set",
       "Beauty & Personal Care > Tools & Accessories > Makeup Brushes & Tools > Brush Sets",
       "synthetic bristles, cruelty free, travel case, dense bristles, easy clean, "
       "vegan friendly, wooden handle, gift box", "color=color", (9, 40)),
    # ---------------------------------------------------------------- food
    _t(FOOD, "granola bars", "Granola Bars",
       "Grocery & Gourmet Food > Snacks & Sweets > Snack Bars > Granola & Nutrition Bars",
       "gluten free, low sugar, high protein, non gmo, whole grain, dairy free, "
       "individually wrapped, simple ingredients", "flavor=flavor pack=pack", (5, 30)),
    _t(FOOD, "potato chips", "Potato Chips",
       "Grocery & Gourmet Food > Snacks & Sweets > Chips & Crisps > Potato Chips",
       "kettle cooked, gluten free, non gmo, avocado oil, low sodium, family size, "
       "individually bagged, no artificial flavors", "flavor=flavor pack=pack", (3, 28)),
    _t(FOOD, "ground coffee", "Ground Coffee",
       "Grocery & Gourmet Food > Beverages > Coffee, Tea & Cocoa > Coffee > Ground Coffee",
       "medium roast, fair trade, single origin, dark roast, usda organic, "
       "low acid, whole bean, rainforest alliance", "weight=weight", (7, 40)),
    _t(FOOD, "green tea", "Green Tea",
       "Grocery & Gourmet Food > Beverages > Coffee, Tea & Cocoa > Tea > Green Tea",
       "usda organic, caffeine free, loose leaf, tea bags, antioxidant rich, "
       "japanese matcha, non gmo, decaf option", "flavor=flavor pack=pack", (4, 25)),
    _t(FOOD, "almond butter", "Almond Butter",
       "Grocery & Gourmet Food > Pantry Staples > Jams, Jellies & Sweet Spreads > Nut Butters",
       "keto friendly, no sugar added, dry roasted, usda organic, non gmo, "
       "palm oil free, creamy texture, single ingredient", "weight=weight pack=pack", (8, 30)),
    _t(FOOD, "pasta sauce", "Pasta Sauce",
       "Grocery & Gourmet Food > Pantry Staples > Sauces, Gravies & Marinades > Pasta Sauces",
       "no sugar added, low sodium, vine ripened, extra virgin, gluten free, "
       "slow simmered, family recipe, plant based", "flavor=flavor pack=pack", (4, 22)),
    _t(FOOD, "beef jerky", "Beef Jerky",
       "Grocery & Gourmet Food > Meat & Seafood > Jerky & Dried Meats > Beef Jerky",
       "high protein, grass fed, low fat, keto friendly, gluten free, zero sugar, "
       "small batch, hickory smoked", "flavor=flavor weight=weight", (6, 35)),
    _t(FOOD, "dark chocolate", "Dark Chocolate Bar",
       "Grocery & Gourmet Food > Snacks & Sweets > Chocolate > Chocolate Bars",
       "fair trade, dairy free, ethically sourced, low sugar, single origin, "
       "vegan friendly, gift box, cacao nibs", "flavor=flavor pack=pack", (4, 30)),
    _t(FOOD, "olive oil", "Olive Oil",
       "Grocery & Gourmet Food > Pantry Staples > Cooking & Baking > Oils > Olive Oil",
       "extra virgin, cold pressed, first harvest, glass bottle, usda organic, "
       "single estate, non gmo, kosher certified", "volume=volume pack=pack", (9, 45)),
    _t(FOOD, "protein powder", "Protein Powder",
       "Grocery & Gourmet Food > Pantry Staples > Cooking & Baking > Protein Supplements",
       "plant based, whey isolate, no artificial sweeteners, gluten free, keto friendly, "
       "grass fed, easy mixing, added probiotics", "flavor=flavor weight=weight", (20, 80)),
    _t(FOOD, "trail mix", "Trail Mix",
       "Grocery & Gourmet Food > Snacks & Sweets > Nuts & Seeds > Trail Mix",
       "individually wrapped, no added sugar, roasted nuts, dried fruit, resealable bag, "
       "gluten free, heart healthy, non gmo", "flavor=flavor pack=pack", (5, 25)),
    _t(FOOD, "sparkling water", "Sparkling Water",
       "Grocery & Gourmet Food > Beverages > Bottled Beverages, Water & Drink Mixes > Sparkling Water",
       "zero calories, no sweeteners, natural flavors, bpa free, sodium free, "
       "glass bottles, real fruit, caffeine free", "flavor=flavor pack=pack", (5, 30)),
    # ---------------------------------------------------------------- fashion
    _t(FASHION, "running shoes", "Running Shoes",
       "Clothing, Shoes & Jewelry > Men > Shoes > Athletic > Running",
       "rubber sole, memory foam, breathable mesh, arch support, non slip, lace up, "
       "lightweight cushioning, wide width", "shoe_size=shoe_size color=color", (35, 140), "Men,Women"),
    _t(FASHION, "women's slippers", "Slippers",
       "Clothing, Shoes & Jewelry > Women > Shoes > Slippers",
       "faux fur, memory foam, rubber sole, anti slip, machine washable, open toe, "
       "house shoes, plush lining", "shoe_size=shoe_size color=color", (12, 45), "Women"),
    _t(FASHION, "men's t-shirts", "T-Shirt",
       "Clothing, Shoes & Jewelry > Men > Clothing > Shirts > T-Shirts",
       "short sleeve, machine wash, classic fit, crew neck, cotton heather, "
       "moisture wicking, tagless label, pre shrunk", "apparel_size=apparel_size color=color",
       (8, 30), "Men"),
    _t(FASHION, "women's hoodies", "Hoodie",
       "Clothing, Shoes & Jewelry > Women > Clothing > Fashion Hoodies & Sweatshirts",
       "long sleeve, fleece lined, drawstring closure, relaxed fit, kangaroo pocket, "
       "machine wash, oversized style, brushed interior", "apparel_size=apparel_size color=color",
       (18, 55), "Women"),
    _t(FASHION, "men's jeans", "Jeans",
       "Clothing, Shoes & Jewelry > Men > Clothing > Jeans",
       "straight leg, stretch denim, button closure, slim fit, machine wash, five pocket, "
       "classic rise, zip fly", "fit=fit color=color", (25, 80), "Men"),
    _t(FASHION, "women's leggings", "Leggings",
       "Clothing, Shoes & Jewelry > Women > Clothing > Active > Leggings",
       "high waist, tummy control, squat proof, side pockets, moisture wicking, "
       "four way stretch, buttery soft, yoga workout", "apparel_size=apparel_size color=color",
       (12, 45), "Women"),
    _t(FASHION, "rain jacket", "Rain Jacket",
       "Clothing, Shoes & Jewelry > Men > Clothing > Jackets & Coats > Raincoats",
       "waterproof shell, packable hood, zipper pockets, windproof design, breathable lining, "
       "adjustable cuffs, reflective details, lightweight fabric",
       "apparel_size=apparel_size color=color", (30, 120), "Men,Women"),
    _t(FASHION, "leather belt", "Leather Belt",
       "Clothing, Shoes & Jewelry > Men > Accessories > Belts",
       "genuine leather, alloy buckle, gift box, adjustable length, reversible design, "
       "dress casual, full grain, ratchet system", "apparel_size=apparel_size color=color",
       (12, 50), "Men"),
    _t(FASHION, "crew socks", "Crew Socks",
       "Clothing, Shoes & Jewelry > Men > Clothing > Socks > Casual Socks",
       "cushioned sole, moisture wicking, arch compression, cotton blend, reinforced heel, "
       "odor control, breathable knit, athletic performance", "pack=pack color=color",
       (9, 30), "Men,Women"),
    _t(FASHION, "baseball cap", "Baseball Cap",
       "Clothing, Shoes & Jewelry > Men > Accessories > Hats & Caps > Baseball Caps",
       "adjustable strap, cotton twill, embroidered logo, curved brim, sun protection, "
       "washed denim, unstructured crown, mesh back", "color=color", (9, 30), "Men,Women"),
    _t(FASHION, "winter gloves", "Winter Gloves",
       "Clothing, Shoes & Jewelry > Women > Accessories > Gloves & Mittens > Cold Weather Gloves",
       "touch screen, thermal lining, windproof design, knit cuff, waterproof shell, "
       "fleece interior, anti slip, wool blend", "apparel_size=apparel_size color=color",
       (10, 40), "Women,Men"),
    _t(FASHION, "summer dress", "Summer Dress",
       "Clothing, Shoes & Jewelry > Women > Clothing > Dresses > Casual",
       "short sleeve, floral print, v neck, flowy hem, side pockets, tie waist, "
       "midi length, machine wash", "apparel_size=apparel_size color=color", (20, 60), "Women"),
    # ---------------------------------------------------------------- furniture
    _t(FURNITURE, "coffee table", "Coffee Table",
       "Home & Kitchen > Furniture > Living Room Furniture > Tables > Coffee Tables",
       "living room, solid wood, storage shelf, easy assembly, metal frame, lift top, "
       "mid century, tempered glass", "finish=finish", (60, 350)),
    _t(FURNITURE, "tv stand", "TV Stand",
       "Home & Kitchen > Furniture > Living Room Furniture > TV & Media Furniture > Television Stands",
       "living room, cable management, storage space, wall mounted, high gloss, "
       "open shelves, engineered wood, led lights", "finish=finish furniture_size=furniture_size",
       (70, 400)),
    _t(FURNITURE, "bar stools", "Bar Stools",
       "Home & Kitchen > Furniture > Kitchen & Dining Room Furniture > Stools > Barstools",
       "dining room, swivel seat, adjustable height, faux leather, back support, footrest ring, "
       "set of two, counter height", "color=color", (50, 300)),
    _t(FURNITURE, "bookshelf", "Bookshelf",
       "Home & Kitchen > Furniture > Home Office Furniture > Bookcases",
       "home office, storage space, easy assembly, anti tip, adjustable shelves, "
       "industrial style, ladder design, solid wood", "finish=finish furniture_size=furniture_size",
       (40, 260)),
    _t(FURNITURE, "office chair", "Office Chair",
       "Home & Kitchen > Furniture > Home Office Furniture > Home Office Chairs > Desk Chairs",
       "lumbar support, high back, ergonomic design, breathable mesh, padded armrests, "
       "swivel casters, adjustable height, home office", "color=color", (60, 400)),
    _t(FURNITURE, "bed frame", "Bed Frame",
       "Home & Kitchen > Furniture > Bedroom Furniture > Beds, Frames & Bases > Bed Frames",
       "box spring, metal frame, storage drawers, upholstered headboard, noise free, "
       "easy assembly, under bed, solid wood", "bed_size=bed_size color=color", (120, 700)),
    _t(FURNITURE, "nightstand", "Nightstand",
       "Home & Kitchen > Furniture > Bedroom Furniture > Nightstands",
       "storage drawer, charging station, easy assembly, open shelf, solid wood, "
       "living room, compact size, metal handles", "finish=finish", (35, 200)),
    _t(FURNITURE, "dining table", "Dining Table",
       "Home & Kitchen > Furniture > Kitchen & Dining Room Furniture > Tables > Dining Tables",
       "dining room, solid wood, extendable leaf, seats six, metal legs, farmhouse style, "
       "easy clean, space saving", "finish=finish style=style", (150, 900)),
    _t(FURNITURE, "throw pillow covers", "Throw Pillow Covers",
       "Home & Kitchen > Bedding > Decorative Pillows, Inserts & Covers > Throw Pillow Covers",
       "living room, hidden zipper, machine washable, velvet fabric, double sided, "
       "boho style, set of four, farmhouse decor", "color=color furniture_size=furniture_size",
       (10, 40)),
    _t(FURNITURE, "area rug", "Area Rug",
       "Home & Kitchen > Home Decor > Area Rugs, Runners & Pads > Area Rugs",
       "living room, non slip, machine washable, low pile, stain resistant, "
       "shag texture, pet friendly, vintage pattern", "color=color style=style", (40, 350)),
    _t(FURNITURE, "floor lamp", "Floor Lamp",
       "Home & Kitchen > Lighting & Ceiling Fans > Lamps & Shades > Floor Lamps",
       "living room, dimmable led, foot switch, linen shade, remote control, "
       "arc design, reading light, energy efficient", "finish=finish", (40, 220)),
    _t(FURNITURE, "shoe rack", "Shoe Rack",
       "Home & Kitchen > Storage & Organization > Clothing & Closet Storage > Shoe Organizers",
       "space saving, entryway storage, easy assembly, bamboo wood, stackable tiers, "
       "metal frame, dust cover, narrow design", "finish=finish", (20, 120)),
    # ---------------------------------------------------------------- electronics
    _t(ELECTRONICS, "wireless earbuds", "Wireless Earbuds",
       "Electronics > Headphones, Earbuds & Accessories > Headphones & Earbuds > Earbud Headphones",
       "noise cancelling, charging case, water resistant, bluetooth connectivity, hands free, "
       "deep bass, touch control, long battery", "color=color", (20, 200)),
    _t(ELECTRONICS, "bluetooth speaker", "Bluetooth Speaker",
       "Electronics > Portable Audio & Video > Portable Speakers & Docks > Portable Bluetooth Speakers",
       "waterproof design, stereo sound, long battery, built in microphone, deep bass, "
       "usb charging, outdoor travel, party lights", "color=color", (25, 180)),
    _t(ELECTRONICS, "usb c cable", "USB C Cable",
       "Electronics > Computers & Accessories > Computer Accessories & Peripherals > Cables > USB Cables",
       "fast charging, braided nylon, data transfer, high speed, aluminum connectors, "
       "tangle free, plug play, durable design", "length=length pack=pack", (6, 25)),
    _t(ELECTRONICS, "memory card", "Memory Card",
       "Electronics > Computers & Accessories > Data Storage > Memory Cards > Micro SD Cards",
       "high speed, 4k video, water proof, sd adapter, shock proof, "
       "action cameras, class ten, temperature proof", "capacity=capacity", (8, 90)),
    _t(ELECTRONICS, "power bank", "Power Bank",
       "Electronics > Cell Phones & Accessories > Chargers & Power Adapters > Portable Power Banks",
       "fast charging, usb c, led display, compact size, dual output, "
       "wireless charging, airline approved, high capacity", "color=color", (15, 80)),
    _t(ELECTRONICS, "wireless mouse", "Wireless Mouse",
       "Electronics > Computers & Accessories > Computer Accessories & Peripherals > Keyboards, Mice & Accessories > Mice",
       "ergonomic design, silent click, usb receiver, adjustable dpi, long battery, "
       "plug play, rechargeable battery, bluetooth connectivity", "color=color", (10, 60)),
    _t(ELECTRONICS, "mechanical keyboard", "Mechanical Keyboard",
       "Electronics > Computers & Accessories > Computer Accessories & Peripherals > Keyboards, Mice & Accessories > Keyboards",
       "rgb backlit, hot swappable, anti ghosting, wired usb, compact layout, "
       "blue switches, detachable cable, aluminum frame", "color=color model=model", (35, 170)),
    _t(ELECTRONICS, "phone case", "Phone Case",
       "Electronics > Cell Phones & Accessories > Cases, Holsters & Sleeves > Basic Cases",
       "shockproof protection, wireless charging, slim fit, raised edges, kickstand design, "
       "clear back, screen protector, drop tested", "color=color model=model", (7, 35)),
    _t(ELECTRONICS, "hdmi cable", "HDMI Cable",
       "Electronics > Television & Video > Accessories > Cables > HDMI Cables",
       "high speed, 4k video, gold plated, ethernet support, braided nylon, "
       "plug play, home theater, 8k ready", "length=length pack=pack", (7, 30)),
    _t(ELECTRONICS, "security camera", "Security Camera",
       "Electronics > Camera & Photo > Video Surveillance > Surveillance Cameras > Dome Cameras",
       "motion detection, night vision, two way audio, cloud storage, easy install, "
       "high definition, weather resistant, remote control", "model=model pack=pack", (30, 220)),
    _t(ELECTRONICS, "smart watch", "Smart Watch",
       "Electronics > Wearable Technology > Smartwatches",
       "heart rate, sleep tracking, water resistant, gps tracking, long battery, "
       "touch screen, blood oxygen, step counter", "color=color model=model", (40, 300)),
    _t(ELECTRONICS, "tablet stand", "Tablet Stand",
       "Electronics > Computers & Accessories > Tablet Accessories > Stands",
       "adjustable angle, aluminum alloy, foldable design, non slip, desk mount, "
       "portable size, cable hole, sturdy base", "color=color", (10, 45)),
)

#: Invented brand names per category (title-case proper nouns).
BRANDS: dict[str, tuple[str, ...]] = {
    BEAUTY: ("Lumora", "Verdant Bloom", "Aurelle", "Pure Fern", "Sable & Sage", "Nuvessa",
             "Clearwell", "Mirabel", "Oakhaven", "Serenna"),
    FOOD: ("Harvest Lane", "Goldfield", "Nutrivo", "Copper Kettle", "Sunmeadow", "Brambleton",
           "Trailcraft", "Olivaro", "Peakfuel", "Maple Ridge"),
    FASHION: ("Northvale", "Strideon", "Urban Loom", "Kestrel", "Marlowe & Finch", "Cobalt Row",
              "Everpine", "Solenne", "Ridgeway", "Halden"),
    FURNITURE: ("Homelyn", "Timberline", "Nestwood", "Arbor Lane", "Loftique", "Casaverde",
                "Brightmoor", "Ironleaf", "Willowcrest", "Modeva"),
    ELECTRONICS: ("Voltrix", "Soniq", "Aerolink", "Pixelon", "Quantix", "Boltwave", "Nexora",
                  "Lumitek", "Corevia", "Zentrax"),
}
